"""CLI commands ``sweep`` and ``status`` (registered on ``cli.app``).

Hooks for tests (hidden options, not for users): ``--measurer module:factory`` replaces the GPU
measurer in the workers and ``--setup module:function`` (repeatable) runs in the sweep process and in
every worker before anything else (tests register their variants there). Only together with
``--measurer``, ``AUTOTUNER_FAKE_GPU=h100`` (or ``h100:2`` for two devices) stands in for GPU detection,
so the real command runs end to end on a machine without a GPU. A real sweep never reads it.
"""
from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack
from typing import Annotated, Callable, Literal, Optional

import typer
from rich.markup import escape
from rich.table import Table

from autotuner.cli.app import DbOption, TimingMethod, UserError, command, console, how_to_fill, out, parse_duration, print_json, print_table

log = logging.getLogger(__name__)

REAL_MEASURER = "autotuner.tune.measure:Measurer"
FAKE_GPU_ENV = "AUTOTUNER_FAKE_GPU"
L2Mode = Literal["cold", "warm"]
TimingKind = Literal["events", "graph"]
GridKind = Literal["domain", "classic", "measured"]
ALL_DEVICES = "all"


def resolve_method(method: str | None, l2: str | None, timing: str | None) -> str:
    """The stored timing method from ``--l2``/``--timing`` (the issue's spelling) or ``--method``:
    events+cold → cold, events+warm → warm, graph → graph (each already one of its choices: Typer checks
    them). Contradictions are refused."""
    implied = None
    if timing == "graph":
        if l2 == "cold":
            raise UserError("--l2 cold needs --timing events (graph replays run back to back, so L2 stays warm)", code=2)
        implied = "graph"
    elif timing == "events" or l2 is not None:
        implied = l2 or "cold"
    if method is None:
        return implied or "cold"
    if implied is not None and implied != method:
        raise UserError(f"--method {method} contradicts --l2/--timing (which mean {implied}); give one or the other", code=2)
    return method


def device_indices(text: str) -> list[int] | str:
    """``--devices``' value: a comma list of distinct device indices, or ``all``; anything else is a bad
    parameter (Typer's one-line usage error, exit 2)."""
    if text.strip().lower() == ALL_DEVICES:
        return ALL_DEVICES
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma list of device indices or 'all' (e.g. 0,1)") from None
    if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise typer.BadParameter(f"{text!r}: expected distinct non-negative indices such as 0,1, or 'all'")
    return indices


def chosen_devices(devices: list[int] | str | None, device: int, count: Callable[[], int]) -> list[int]:
    """The devices to sweep on: ``--devices`` (``all``: every visible one), else ``--device``."""
    if devices is None:
        return [device]
    if devices != ALL_DEVICES:
        return list(devices)
    found = count()
    if found < 1:
        raise UserError("--devices all: no CUDA device is visible", code=1)
    return list(range(found))


def fake_gpu(measurer: str) -> tuple[str, int] | None:
    """(model key, device count) from AUTOTUNER_FAKE_GPU when a test measurer is in use, else None."""
    from kernels.settings import settings

    spec = settings.fake_gpu
    if not spec:
        return None
    if measurer == REAL_MEASURER:
        console.print(f"[yellow]ignoring {FAKE_GPU_ENV}[/yellow]: it only applies with a test measurer", highlight=False)
        return None
    key, _, count = spec.partition(":")
    try:
        return key.strip().lower(), int(count or 1)
    except ValueError:
        raise UserError(f"{FAKE_GPU_ENV}={spec!r} is not MODEL or MODEL:COUNT (e.g. h100:2)", code=2) from None


def resolve_gpus(gpu: str, devices: list[int], fake: tuple[str, int] | None):  # noqa: ANN201 - GpuInfo
    """The one GPU model swept on every device; mixed models are refused."""
    from autotuner.lookup.gpu import GpuInfo, GpuMismatchError, NoGpuError, resolve_gpu, validate_gpu_key

    if fake is not None:
        key, count = fake
        missing = [d for d in devices if d >= count]
        if missing:
            raise NoGpuError(f"no device {missing[0]} ({FAKE_GPU_ENV} declares {count})")
        if gpu.strip().lower() != "auto" and validate_gpu_key(gpu) != key:
            raise GpuMismatchError(f"--gpu {gpu} asked for '{validate_gpu_key(gpu)}', but the (fake) devices are '{key}'")
        return GpuInfo(key, f"fake {key} for tests")
    found = [resolve_gpu(gpu, index) for index in devices]
    keys = {info.key for info in found}
    if len(keys) > 1:
        listing = ", ".join(f"{d}: {info.key}" for d, info in zip(devices, found))
        raise GpuMismatchError(f"--devices mixes GPU models ({listing}); sweep one model at a time")
    return found[0]


def choose_grid(grid: str | None, m: str | None, n: str | None) -> str:
    """``--grid`` domain (default) or classic; --m/--n list the classic grid's axes, so they imply it."""
    if grid is None:
        return "classic" if m or n else "domain"
    if grid in ("domain", "measured") and (m or n):
        raise UserError(f"--m/--n set the classic grid's axes; the {grid} grid chooses its own shapes "
                        "(drop --m/--n or use --grid classic)", code=2)
    return grid


def measured_grid(engine, gpu_key: str, timing_method: str, dtypes, variants) -> list[tuple[int, int, str]]:  # noqa: ANN001 - Engine
    """``--grid measured``: the shapes of ``dtypes`` the database holds for this GPU and method where a
    config of one of ``variants`` applies; a clear error when there are none."""
    from sqlalchemy.orm import Session

    from db.queries import measured_shapes

    with Session(engine) as session:
        held = [shape for shape in measured_shapes(session, gpu_key, timing_method) if shape[2] in dtypes]
    runnable = [shape for shape in held if any(v.configs(*shape) for v in variants)]
    if not runnable:
        what = f"{len(held)} measured shape(s), none of which the chosen variants run" if held else "no measured shape"
        raise UserError(f"--grid measured: the database holds {what} for {gpu_key} ({timing_method}, "
                        f"{','.join(sorted(dtypes))}); import a recording or sweep a grid first")
    return runnable


def visible_device_count() -> int:
    import torch

    return torch.cuda.device_count()


@command()
def sweep(
    gpu: Annotated[str, typer.Option(help="GPU model to tune (h100, h200, a100, ...) or 'auto'; must match the devices.")] = "auto",
    db: DbOption = None,
    grid: Annotated[Optional[GridKind], typer.Option("--grid", case_sensitive=False, help="domain: coarse lattice over the whole shape domain, then refinement where neighbouring winners disagree (default; stops at --budget, 25m unless given). classic: the fixed grid (implied by --m/--n). measured: the shapes this GPU already has rows for in the database, no new ones (a new variant or config measured where the others were).")] = None,
    m: Annotated[Optional[str], typer.Option("--m", help="Comma list of M (rows), e.g. 1,32,4096, for the classic grid. Default: the documented grid.")] = None,
    n: Annotated[Optional[str], typer.Option("--n", help="Comma list of N (row length), e.g. 1024,32000,50257.")] = None,
    dtype: Annotated[str, typer.Option(help="Comma list of fp32, fp16, bf16 (aliases accepted), or 'all'.")] = "all",
    variant: Annotated[Optional[list[str]], typer.Option("--variant", help="Only these variants (repeatable).")] = None,
    l2: Annotated[Optional[L2Mode], typer.Option("--l2", help="cold: L2 flushed before each timed call (default); warm: input may sit in L2.")] = None,
    timing: Annotated[Optional[TimingKind], typer.Option("--timing", help="events: CUDA events per call (default); graph: replays of a captured CUDA graph.")] = None,
    method: Annotated[Optional[TimingMethod], typer.Option("--method", help="Stored timing method cold, warm or graph (same as --l2/--timing).")] = None,
    device: Annotated[int, typer.Option(help="CUDA device index to sweep on (one GPU).")] = 0,
    devices: Annotated[Optional[str], typer.Option("--devices", parser=device_indices, metavar="<0,1|all>", help="Several GPUs of one model: comma list of indices (0,1) or 'all'.")] = None,
    time_cap: Annotated[float, typer.Option(help="Seconds of timing per candidate and shape, at most.")] = 0.5,
    item_timeout: Annotated[float, typer.Option(help="Seconds before a hung candidate is killed.")] = 120.0,
    budget: Annotated[Optional[str], typer.Option(help="Stop after this wall time (90s, 10m, 1h); shapes go coarse to fine.")] = None,
    lease: Annotated[float, typer.Option(help="Seconds a shape stays claimed by a sweeper that stopped renewing (died on another host) before others take it over.", min=1.0)] = 600.0,
    retime_unstable: Annotated[Optional[float], typer.Option("--retime-unstable", min=1.0, help="Also measure again stored rows whose p80 exceeds this multiple of their p20, or that are over 3x the same kernel's time at a larger shape (disturbed timings; 2 is the measurer's own limit). Fits use the newest row.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Start from this GPU's predicted table (autotuner predict): measure its pick and runners-up where it is least sure, then refit (default budget 5m).")] = False,
    recopy: Annotated[bool, typer.Option("--recopy", help="Also measure every shape's copy reference again (the speed of light reports divide by; they read the newest).")] = False,
    measurer: Annotated[str, typer.Option(hidden=True, help="Tests: worker measurer factory, module:attribute.")] = REAL_MEASURER,
    setup: Annotated[Optional[list[str]], typer.Option(hidden=True, help="Tests: module:function run in the sweep process and each worker first.")] = None,
) -> None:
    """Verify and time every applicable kernel config on every shape; results go to the database.

    Rerun the same command to resume: what is in the database is skipped. Several processes or hosts may run it on one database at once; they share the shapes between them."""
    from autotuner.tune import grid as grids
    from autotuner.tune.env import collect_environment
    from autotuner.tune.parallel import open_shared_database
    from autotuner.tune.progress import SweepProgress
    from autotuner.tune.sampling import COARSE_M, COARSE_N, DEFAULT_DOMAIN_BUDGET_S, coarse_shapes, describe_estimate, estimate_seconds
    from autotuner.report.heldout import all_held_out_shapes
    from autotuner.fit.quick import QUICK_BUDGET_S, label, predictions_of, starting_predictions
    from autotuner.tune.strategy import DomainStrategy, FixedGrid, QuickStrategy, every_candidate, run_strategy, winner_or_peer_regret
    from autotuner.tune.sweep import Sweep, plan, usable_variants
    from autotuner.tune.worker import WorkerRunner, resolve_hook
    from kernels import all_variants

    timing_method = resolve_method(method, l2, timing)
    if quick and (grid or m or n):
        raise UserError("--quick chooses its own shapes from the predicted table: drop --grid/--m/--n", code=2)
    kind = "quick" if quick else choose_grid(grid, m, n)
    ms = grids.parse_int_list(m, "--m") if m else list(grids.DEFAULT_M)
    ns = grids.parse_int_list(n, "--n") if n else list(grids.DEFAULT_N)
    dtypes = grids.parse_dtypes(dtype)
    budget_s = parse_duration(budget) if budget else {"domain": DEFAULT_DOMAIN_BUDGET_S, "quick": QUICK_BUDGET_S}.get(kind)
    if lease <= item_timeout:
        raise UserError(f"--lease {lease:g} must exceed --item-timeout {item_timeout:g}: a claim is renewed once per item", code=2)
    hooks = list(setup or [])
    for hook in [measurer, *hooks]:
        resolve_hook(hook)  # a bad spec fails here, once, not in every worker
    for hook in hooks:
        resolve_hook(hook)()
    fake = fake_gpu(measurer)
    device_list = chosen_devices(devices, device, (lambda: fake[1]) if fake else visible_device_count)
    gpu_info = resolve_gpus(gpu, device_list, fake)  # no GPU: refused before a database is opened, or made
    engine = open_shared_database(db)
    variants, skipped = usable_variants(all_variants(), variant)
    for name, reason in skipped.items():
        console.print(f"[yellow]skipping[/yellow] {name}: {reason}", highlight=False)
    if not variants:
        raise UserError("no variant can run on this machine (see the reasons above)")
    if kind == "quick":
        try:
            predicted = starting_predictions(gpu_info.key, dtypes)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        strategy = QuickStrategy({shape: times for document in predicted.values()
                                  for shape, times in predictions_of(document).items()})
        candidates = every_candidate(variants)
        described = {"strategy": "quick", "dtypes": sorted(dtypes)}
    elif kind == "domain":
        strategy = DomainStrategy(coarse=coarse_shapes(dtypes), avoid=all_held_out_shapes(dtypes),
                                  error=winner_or_peer_regret())  # issue 30: also where a peer beats ours
        candidates = every_candidate(variants)
        described = {"strategy": "domain", "m": list(COARSE_M), "n": list(COARSE_N), "dtypes": sorted(dtypes)}
    elif kind == "measured":
        strategy = FixedGrid(measured_grid(engine, gpu_info.key, timing_method, dtypes, variants), name="measured")
        candidates = plan(variants, strategy.shapes)[0]
        described = {"strategy": "measured", "shapes": len(strategy.shapes), "dtypes": sorted(dtypes)}
    else:
        strategy = FixedGrid(grids.shapes(ms, ns, dtypes))
        candidates = plan(variants, strategy.shapes)[0]
        described = {"m": ms, "n": ns, "dtypes": sorted(dtypes)}
    runner_sweep = Sweep(engine, gpu_info, collect_environment(), timing_method, candidates, command=" ".join(sys.argv),
                         grid=described, lease_s=lease, retime_spread=retime_unstable, recopy=recopy)
    console.print(f"sweep run {runner_sweep.run_id} on {gpu_info.name} ({gpu_info.key}), devices "
                  f"{','.join(map(str, device_list))}: {kind} grid, {len(candidates)} candidates, method {timing_method}"
                  + (f", budget {budget_s / 60:.1f} min" if budget_s else ""), highlight=False)
    with ExitStack() as stack:
        runners = [stack.enter_context(WorkerRunner(index, timing_method, item_timeout_s=item_timeout,
                                                    time_cap_s=time_cap, setup=hooks, measurer_factory=measurer))
                   for index in device_list]
        progress = stack.enter_context(SweepProgress(console, 0))

        def announce(round_number: int, items: list) -> None:
            shapes = len({item.shape_key for item in items})
            if kind == "domain":
                what = "coarse lattice" if round_number == 0 else f"refinement round {round_number}"
            else:
                what = {"quick": f"quick round {round_number + 1}", "measured": "measured shapes"}.get(kind, "grid")
            progress.console.print(f"{what}: {shapes} shapes, {len(items)} items; "
                                   f"{describe_estimate(estimate_seconds(items, 'domain' if kind in ('domain', 'quick') else 'classic'), len(items), len(device_list))}",
                                   highlight=False)
            progress.grow(len(items))

        def plan_items(shapes: list) -> list:  # a quick sweep measures only the candidates its strategy names
            items = plan(variants, shapes)[1]
            return items if kind != "quick" else [item for item in items if item.kind == "copy" or label(
                item.variant, item.config_key) in strategy.candidates_at(item.shape_key)]

        started = time.monotonic()
        summaries = run_strategy(runner_sweep, runners, strategy, plan_items,
                                 progress=progress.update, budget_s=budget_s, on_round=announce)
        swept_s = time.monotonic() - started
    by_status: dict[str, int] = {}
    for summary in summaries:
        for key, count in summary.by_status.items():
            by_status[key] = by_status.get(key, 0) + count
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())) or "nothing new"
    console.print(f"run {runner_sweep.run_id}: measured {sum(s.measured for s in summaries)} ({statuses}); "
                  f"{sum(s.skipped_existing for s in summaries)} already in the database; {len(summaries)} round(s); "
                  f"worker restarts {sum(r.restarts for r in runners)}; {swept_s:.0f} s", highlight=False)
    if kind == "quick":
        _refit_quick(engine, gpu_info.key, predicted, timing_method)


def _refit_quick(engine, gpu_key: str, predicted: dict, timing_method: str) -> None:  # noqa: ANN001 - Engine
    """Store each dtype's quick-sweep table (``autotuner/fit/quick.py``) as the GPU's current table."""
    from sqlalchemy.orm import Session

    from autotuner.fit.fit import FitError
    from autotuner.fit.quick import refit_after_quick

    for dtype, document in predicted.items():
        with Session(engine, expire_on_commit=False) as session, session.begin():
            try:
                table = refit_after_quick(session, gpu_key, document, timing_method)
            except FitError as exc:
                console.print(f"[yellow]{exc}[/yellow]: {gpu_key}/{dtype} keeps its predicted table", highlight=False)
                continue
        console.print(f"{gpu_key}/{dtype}: quick-sweep table stored ({table['measured_shapes']} shapes measured, "
                      f"{len(table['candidates'])} candidates)", highlight=False)


@command()
def status(
    db: DbOption = None,
    gpu: Annotated[Optional[str], typer.Option(help="Only this GPU model (h100, ...).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Per GPU: sweep runs, measurements by status, and which current dispatch tables are stale."""
    from sqlalchemy.orm import Session

    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.report.status import database_status
    from db.engine import reader_engine

    key = validate_gpu_key(gpu) if gpu else None
    engine = reader_engine(db)
    if engine is None:  # a fresh install: nothing measured yet is a state, not an error
        report = {"gpus": [], "work_list": {"by_status": {}, "claimed": []}}
    else:
        with Session(engine) as session:
            report = database_status(session, key)
        engine.dispose()
    if as_json:
        print_json(report)
        return
    if not report["gpus"]:
        out.print(f"no sweep runs{f' of {key}' if key else ''} in this database yet: {how_to_fill(key)}",
                  highlight=False, markup=False, soft_wrap=True)
        return

    def say(text: str) -> None:  # data (hosts, claim tags) is printed as is: no markup, no :emoji: codes
        out.print(text, markup=False, emoji=False, highlight=False)

    for entry in report["gpus"]:
        runs = entry["runs"]
        last = runs["last"][0] if runs["last"] else None
        by_status = ", ".join(f"{k} {v}" for k, v in sorted(runs["by_status"].items()))
        say(f"{entry['gpu']} ({entry['name']}): {runs['count']} runs ({by_status})")
        if last:
            say(f"  last run {last['id']}: {last['status']}, {last['timing_method']}, started {last['started_at']}"
                f" on {last['host'] or '?'}")
        say(f"  measurements: {', '.join(f'{k} {v}' for k, v in sorted(entry['measurements'].items())) or 'none'}")
        if not entry["tables"]:
            say("  no fitted tables")
            continue
        table = Table("dtype", "method", "table", "fitted", "stale")
        for row in entry["tables"]:
            table.add_row(row["dtype"], row["timing_method"], str(row["table_id"]), row["created_at"] or "-",
                          escape("; ".join(row["reasons"])) if row["stale"] else "no")
        print_table(table)
    work = report["work_list"]
    if work["by_status"]:
        say("work list: " + ", ".join(f"{k} {v}" for k, v in sorted(work["by_status"].items())))
        for claim in work["claimed"]:
            say(f"  {claim['shape']} held by {claim['claimed_by']} until {claim['lease_expires_at']}")
