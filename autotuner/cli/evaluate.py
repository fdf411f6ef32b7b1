"""CLI commands for evaluating dispatch tables and the dispatched softmax (registered on ``cli.app``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Optional

import typer
from rich.table import Table

from autotuner.cli.app import (DbOption, DtypesOption, MethodOption, UserError, check_output_folder, command, console, out,
                               print_json, print_table)
from autotuner.report.heldout import HELD_OUT_SETS

SetName = Literal[tuple(HELD_OUT_SETS)]  # type: ignore[valid-type] - checked and listed by Typer
SetOption = Annotated[Optional[SetName], typer.Option(
    "--set", case_sensitive=False, help="A named held-out set (autotuner/report/heldout.py): attention, vocab, long, odd, small_m, huge_m, "
                  "domain (those six), or the real workloads llm_vocab, attention_rows, moe_router, workloads (those "
                  "three). Replaces --m/--n.")]
SeedOption = Annotated[Optional[int], typer.Option(
    "--seed", help="Draw a fresh random set: --count (M, N) log-uniform over the domain (M 1..2^20, N 1..2^24), "
                   "the same for the same seed, none a point any table was fitted on. With --set: both sets.")]
CountOption = Annotated[int, typer.Option("--count", min=1, max=100000, help="Shapes a dtype that --seed draws.")]


def chosen_shapes(name: str | None, seed: int | None, count: int, m: str | None, n: str | None, dtypes: list[str],
                  tables: Callable[[], Iterable[Any]], max_tensor_bytes: int | None = None,
                  ) -> list[tuple[int, int, str]] | None:
    """The (M, N, dtype) of ``--set NAME`` and ``--seed S`` together, less every (M, N) one of
    ``tables()`` was fitted on (``heldout.never_fitted``); ``--seed`` draws fp32 tensors up to
    ``max_tensor_bytes`` (default ``heldout.RANDOM_MAX_TENSOR_BYTES``). None without either flag; a clear error for
    an unknown name, a set left empty, or --m/--n beside them."""
    if name is None and seed is None:
        return None
    if m or n:
        raise UserError("--set/--seed name the shapes; drop --m/--n (or drop --set/--seed)", code=2)
    from autotuner.report.heldout import RANDOM_MAX_TENSOR_BYTES, held_out_shapes, measured_pairs, never_fitted, random_pairs

    try:
        named = held_out_shapes(name, dtypes) if name is not None else []
    except ValueError as error:
        raise UserError(f"--set: {error}", code=2) from None
    fitted = measured_pairs(tables())
    try:
        drawn = random_pairs(seed, count, max_tensor_bytes or RANDOM_MAX_TENSOR_BYTES, exclude=fitted) if seed is not None else []
    except ValueError as error:
        raise UserError(f"--seed {seed}: {error}", code=2) from None
    shapes = never_fitted(list(dict.fromkeys(named + [(m_, n_, d) for d in dtypes for m_, n_ in drawn])), fitted)
    if not shapes:
        raise UserError(f"--set {name}: every shape of it is a point a table was fitted on; nothing held out", code=2)
    return shapes


def described_set(name: str | None, seed: int | None, count: int) -> str:
    """How a run's grid record names its shapes (``--set`` and ``--seed`` as given)."""
    return " + ".join(([name] if name else []) + ([f"random seed {seed} count {count}"] if seed is not None else []))


@command()
def evaluate(
    gpu: Annotated[str, typer.Option(help="GPU model whose tables to score (h100, ...) or 'auto' (sweeps need the GPU).")],
    db: DbOption = None,
    dtype: DtypesOption = "all",
    m: Annotated[Optional[str], typer.Option("--m", help="Held-out M list (default: 3,77,500,2000,6000).")] = None,
    n: Annotated[Optional[str], typer.Option("--n", help="Held-out N list (default: 1000,...,200000, off the grid).")] = None,
    shape_set: SetOption = None,
    seed: SeedOption = None,
    count: CountOption = 200,
    method: MethodOption = "cold",
    sweep: Annotated[bool, typer.Option("--sweep/--no-sweep", help="Measure the held-out shapes first (needs the GPU).")] = True,
    device: Annotated[int, typer.Option(help="CUDA device index for the held-out sweep.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
) -> None:
    """Sweep held-out shapes (never used by fit: their run is marked held-out) and score each current
    table's regret on them."""
    import sys

    from sqlalchemy.orm import Session

    from autotuner.tune import grid as grids
    from autotuner.report.evaluate import HELD_OUT_M, HELD_OUT_N, HELD_OUT_PURPOSE, held_out_scores
    from autotuner.lookup.gpu import resolve_gpu, validate_gpu_key
    from autotuner.lookup.select import load_shipped_tables
    from autotuner.records.store import tables_in_database
    from db.engine import make_engine, missing_sqlite_file, reader_engine, resolve_database_url

    dtypes = grids.parse_dtypes(dtype)
    # read only, until a sweep (which needs the GPU, found first) writes: no command that fails makes a
    # database; without a sweep, a database named but missing is an error (``reader_engine``)
    engine = None if sweep and missing_sqlite_file(resolve_database_url(db)) else reader_engine(db)
    fitted = lambda: tables_in_database(engine=engine) if engine is not None else []  # noqa: E731
    named = chosen_shapes(shape_set, seed, count, m, n, dtypes, lambda: fitted() + load_shipped_tables())
    key = validate_gpu_key(gpu) if gpu != "auto" else None
    if sweep:
        from autotuner.tune.env import collect_environment
        from autotuner.tune.progress import SweepProgress
        from autotuner.tune.sweep import Sweep, plan, usable_variants
        from autotuner.tune.worker import WorkerRunner
        from kernels import all_variants

        ms = grids.parse_int_list(m, "--m") if m else list(HELD_OUT_M)
        ns = grids.parse_int_list(n, "--n") if n else list(HELD_OUT_N)
        shapes = named if named is not None else grids.shapes(ms, ns, dtypes)
        described = {"m": ms, "n": ns} if named is None else {
            "set": described_set(shape_set, seed, count), "m": sorted({s[0] for s in named}), "n": sorted({s[1] for s in named})}
        info = resolve_gpu(gpu, device)
        key = info.key
        engine = make_engine(db)
        variants, _ = usable_variants(all_variants())
        candidates, items = plan(variants, shapes)
        held_out = Sweep(engine, info, collect_environment(), method, candidates, command=" ".join(sys.argv),
                         grid={**described, "purpose": HELD_OUT_PURPOSE})
        with WorkerRunner(device, method) as runner, SweepProgress(console, len(items)) as progress:
            held_out.run(runner, items, progress.update)
    scores = {}
    for table in fitted():
        if table.gpu == key and table.dtype in dtypes and table.timing_method == method:
            with Session(engine) as session:
                scores[table.dtype] = held_out_scores(
                    session, table, only={(m_, n_) for m_, n_, d in named if d == table.dtype} if named else None)
    if not scores:
        raise UserError(f"no fitted {method} table for {key}: run `autotuner fit --gpu {key}` first")
    if as_json:
        print_json(scores)
        return
    report = Table("dtype", "held-out shapes", "regret geomean", "p95", "max", "misses")
    for dt, score in scores.items():
        report.add_row(dt, str(score["shapes"]), *(f"{score[k]:.4f}" if score[k] else "-" for k in ("geomean", "p95", "max")),
                       str(score["misses"]))
    print_table(report)


@command()
def bench(
    dtype: DtypesOption = "all",
    m: Annotated[Optional[str], typer.Option("--m", help="M list (default: the sweep grid's).")] = None,
    n: Annotated[Optional[str], typer.Option("--n", help="N list (default: the sweep grid's).")] = None,
    held_out: Annotated[bool, typer.Option("--held-out", help="Use the held-out shape lists instead of the grid.")] = False,
    shape_set: SetOption = None,
    seed: SeedOption = None,
    count: CountOption = 200,
    method: MethodOption = "cold",
    output: Annotated[str, typer.Option(help="Folder for bench.csv and bench.png.")] = "bench-out",
    rounds: Annotated[int, typer.Option(min=1, max=20, help="Rounds per shape, each on fresh buffers in a "
                                        "rotated order: kernels report their median round, the copy its fastest.")] = 3,
    max_gib: Annotated[Optional[float], typer.Option("--max-gib", min=0.001, help="Leave out input tensors over this "
                                                     "many GiB (default 2, the sweep's cap; about 4x it must fit the "
                                                     "GPU); --seed draws fp32 tensors up to it (default 0.25).")] = None,
    graph_launch: Annotated[bool, typer.Option("--graph-launch", help="Time each call as a CUDA-graph replay of "
                                               "it (cold or warm method): every contender reaches the GPU the same "
                                               "way, whatever its Python launch costs the host.")] = False,
) -> None:
    """Time the dispatched softmax against a copy of the same bytes, torch.softmax, QuACK and Liger."""
    from autotuner.tune import grid as grids
    from autotuner.report.benchrun import bench_shapes, summarize, write_csv, write_outputs
    from autotuner.report.evaluate import HELD_OUT_M, HELD_OUT_N
    from autotuner.lookup.gpu import detect_gpu
    from autotuner.lookup.select import default_store
    from autotuner.report.heldout import tensor_bytes

    if graph_launch and method == "graph":
        raise UserError("--graph-launch goes with --method cold or warm: --method graph already replays graphs", code=2)
    if (shape_set is not None or seed is not None) and held_out:
        raise UserError("--set/--seed and --held-out both name the shapes; give one", code=2)
    default_m, default_n = (HELD_OUT_M, HELD_OUT_N) if held_out else (grids.DEFAULT_M, grids.DEFAULT_N)
    ms = grids.parse_int_list(m, "--m") if m else list(default_m)
    ns = grids.parse_int_list(n, "--n") if n else list(default_n)
    dtypes = grids.parse_dtypes(dtype)
    cap = int(max_gib * 2**30) if max_gib else int(2 * 2**30)
    # the bench dispatches through the default store: its tables' points are the fitted ones
    named = chosen_shapes(shape_set, seed, count, m, n, dtypes, lambda: default_store().tables(),
                          int(max_gib * 2**30) if max_gib else None)
    if named is not None:  # a named set's shapes are fixed; the cap still applies to them
        chosen = [(m_, n_, d) for m_, n_, d in named if tensor_bytes(m_, n_, d) <= cap]
    else:
        chosen = grids.shapes(ms, ns, dtypes, max_tensor_bytes=cap)
    shapes = sorted(chosen, key=lambda s: (s[2], s[0], s[1]))
    if not shapes:
        raise UserError(f"no shape left: every one is over --max-gib {max_gib or 2}", code=2)
    check_output_folder(output, "--output")
    info = detect_gpu()  # after the flags: a bad flag is named even where no GPU is
    rows = bench_shapes(shapes, method, rounds=rounds, graph_launch=graph_launch,
                        progress=lambda line: console.print(line, highlight=False),
                        on_row=lambda so_far: write_csv(so_far, Path(output)))  # a killed run keeps its rows
    written = write_outputs(rows, Path(output), info.name)
    for dt in sorted({r["dtype"] for r in rows}):
        figures = summarize([r for r in rows if r["dtype"] == dt])
        out.print(f"{info.key} {dt}: {figures}", highlight=False)
    out.print(f"overall: {summarize(rows)}; wrote {', '.join(map(str, written))}", highlight=False)
