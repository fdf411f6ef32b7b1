"""``autotuner bench``: the dispatched ``softmax`` against a copy of the same bytes, ``torch.softmax``,
and QuACK / Liger where importable, all timed the same way in one process (CUDA events, L2 flushed
before each timed call, median; several rounds on fresh buffers, see ``bench_shapes``). The copy is
the faster of torch's ``copy_`` and a plain vector copy (``autotuner.tune.measure.copy_reference``). Runs
in-process: it measures the product, not candidates, so a faulting kernel here is a bug to fix, not a
row to record.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kernels.reference import check_softmax, random_input


PEER_VARIANTS = {"torch": "torch_softmax", "quack": "quack_softmax", "liger": "liger_softmax"}


def peer_launchers(dtype: str, n: int) -> dict[str, Callable[[Any, Any], None]]:
    """Launch functions of the peer variants that can run here (torch always; QuACK and Liger when
    their packages import), built through the same registry the sweep uses."""
    from kernels import KernelConfig, get_variant

    launchers = {}
    for label, name in PEER_VARIANTS.items():
        try:
            variant = get_variant(name)
            if variant.available() and variant.supports(1, n, dtype):
                launchers[label] = variant.build(KernelConfig(), dtype, n).launch
        except Exception:  # an optional peer that is absent or fails to build is left out
            continue
    return launchers


def _checked_time(timer: Any, x: Any, dtype: str, call: Callable[[], Any]) -> float | str | None:
    """Median time of ``call()`` (which returns its softmax of ``x``) once its first result passes the
    float64 check; "WRONG" where it does not."""
    if not check_softmax(call(), x, dtype).ok:
        return "WRONG"
    return timer.time(call).median_us


def _writing_into_poisoned(launch: Callable[[Any, Any], None], x: Any) -> Callable[[], Any]:
    """``launch(x, out)`` as a call returning ``out``, a NaN-filled buffer made here."""
    import torch

    out = torch.full_like(x, float("nan"))
    return lambda: (launch(x, out), out)[1]


def _round(timer: Any, m: int, n: int, dtype: str, peers: dict[str, Callable[[Any, Any], None]], shift: int) -> dict[str, Any]:
    """One round on a fresh input and fresh outputs: the copy, the dispatched softmax and each peer,
    in an order rotated by ``shift``. A peer that raises gets "ERR:<exception>" in place of a time."""
    import torch

    from autotuner import softmax
    from autotuner.tune.measure import copy_reference

    x = random_input(m, n, dtype)
    out = torch.empty_like(x)
    runners: dict[str, Callable[[], Any]] = {
        "copy": lambda: copy_reference(timer, x, out).median_us,
        "dispatched": lambda: _checked_time(timer, x, dtype, lambda: softmax(x)),
    }
    for name, launch in peers.items():  # each peer's output exists only while the peer is timed
        runners[name] = lambda f=launch: _checked_time(timer, x, dtype, _writing_into_poisoned(f, x))
    labels = list(runners)
    shift %= len(labels)
    times: dict[str, Any] = {}
    for label in labels[shift:] + labels[:shift]:
        try:
            times[label] = runners[label]()
        except Exception as exc:  # peers fail on some shapes (QuACK at N=50257): record, go on
            if label in ("copy", "dispatched"):  # ours: a bug to see, not a row to record
                raise
            times[label] = f"ERR:{type(exc).__name__}"
    return times


def bench_shapes(shapes: Iterable[tuple[int, int, str]], method: str = "cold", progress: Callable[[str], None] | None = None,
                 rounds: int = 3, graph_launch: bool = False,
                 on_row: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Per shape, ``rounds`` rounds (``_round``: fresh input and buffers, order rotated by one each
    round). A kernel's figure is the median of its rounds (a failure in any round is reported instead);
    the copy's is its fastest round, the speed of light this GPU showed on the shape, so no fraction of
    it is flattered by a slow copy. Fresh buffers each round because one placement of a pair of 128 MB
    buffers was seen to slow everything written there by 15 % (an H100
    bench); the median over placements is what a caller meets. ``graph_launch``: every timed call
    is a CUDA-graph replay of it (``autotuner.tune.timing.Timer``), so that no contender's GPU time depends
    on how fast its Python launch path submits it. ``on_row(rows)`` is called with the rows so far after
    each shape, so that a caller can save them before a long run ends (or is killed)."""
    import statistics

    import torch

    from autotuner import select_kernel
    from autotuner.tune.timing import Timer

    timer = Timer(method, time_cap_s=0.3, graph_launch=graph_launch)
    rows = []
    for m, n, dtype in shapes:
        choice = select_kernel(m, n, dtype)
        row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n, "dispatched": f"{choice.variant}[{choice.config_key}]"}
        peers = peer_launchers(dtype, n)
        samples: dict[str, list[Any]] = {}
        for index in range(rounds):
            for label, value in _round(timer, m, n, dtype, peers, index).items():
                samples.setdefault(label, []).append(value)
            torch.cuda.empty_cache()
        row["copy_us"] = min(samples.pop("copy"))
        for label, values in samples.items():
            failed = [v for v in values if not isinstance(v, float)]
            column = "dispatched_us" if label == "dispatched" else f"{label}_us"
            row[column] = statistics.median(values) if not failed else (None if label == "dispatched" else failed[0])
        rows.append(row)
        if on_row:
            on_row(rows)
        if progress:
            progress(f"{dtype} {m}x{n}: copy {row['copy_us']:.2f} us, dispatched {row['dispatched_us']} us")
    return rows


def fraction(row: dict[str, Any], column: str) -> float | None:
    value = row.get(column)
    return row["copy_us"] / value if isinstance(value, float) and value > 0 else None


def summarize(rows: Sequence[dict[str, Any]], tolerance: float = 0.03) -> dict[str, Any]:
    """Geomean / min fraction of copy speed of the dispatch, how often it is within ``tolerance`` of the
    best of torch / QuACK / Liger on the same shape, and issue 30's other bounds: how many shapes of 1 MB
    or more it runs over 1.05x ``torch.softmax``'s time (and its geomean time against torch), and its
    lowest fraction of copy speed on few long rows (M <= 4, N >= 2^17)."""
    from kernels.base import DTYPE_BYTES

    fractions = [f for f in (fraction(r, "dispatched_us") for r in rows) if f]
    within = compared = 0
    vs_torch, over_torch = [], 0
    for row in rows:
        peers = [row[c] for c in ("torch_us", "quack_us", "liger_us") if isinstance(row.get(c), float)]
        if peers and isinstance(row.get("dispatched_us"), float):
            compared += 1
            within += row["dispatched_us"] <= min(peers) * (1 + tolerance)
        if isinstance(row.get("dispatched_us"), float) and isinstance(row.get("torch_us"), float):
            vs_torch.append(row["dispatched_us"] / row["torch_us"])
            big = row["m"] * row["n"] * DTYPE_BYTES[row["dtype"]] >= 2**20
            over_torch += big and vs_torch[-1] > 1.05
    few_long = [f for f in (fraction(r, "dispatched_us") for r in rows if r["m"] <= 4 and r["n"] >= 2**17) if f]
    return {
        "shapes": len(rows), "geomean": _geomean(fractions), "min": min(fractions) if fractions else None,
        "within_3pct_of_best_peer": f"{within}/{compared}",
        "vs_torch_geomean": _geomean(vs_torch), "over_1.05x_torch_at_1mb_or_more": over_torch,
        "few_long_rows_min": min(few_long) if few_long else None,
    }


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def write_csv(rows: Sequence[dict[str, Any]], folder: Path) -> Path:
    """``folder/bench.csv`` with one line per row, replaced whole (written to a temporary name first)."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["dtype", "m", "n", "copy_us", "dispatched_us", "dispatched", "torch_us", "quack_us", "liger_us"]
    csv_path = folder / "bench.csv"
    partial = folder / "bench.csv.tmp"
    with open(partial, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    partial.replace(csv_path)
    return csv_path


def write_outputs(rows: Sequence[dict[str, Any]], folder: Path, gpu_name: str) -> list[Path]:
    written = [write_csv(rows, folder)]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    dtypes = sorted({r["dtype"] for r in rows})
    figure, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.5), squeeze=False)
    for axis, dtype in zip(axes[0], dtypes):
        for column, style in (("dispatched_us", "o-"), ("torch_us", "s--"), ("quack_us", "^:"), ("liger_us", "v:")):
            for m in sorted({r["m"] for r in rows if r["dtype"] == dtype}):
                points = [(r["n"], fraction(r, column)) for r in rows if r["dtype"] == dtype and r["m"] == m]
                points = [(n, f) for n, f in points if f]
                if points and (column == "dispatched_us" or m == max(r["m"] for r in rows)):
                    axis.plot(*zip(*sorted(points)), style, label=f"{column[:-3]} M={m}", markersize=3)
        axis.set_xscale("log", base=2)
        axis.set_ylim(0, 1.1)
        axis.set_title(f"{gpu_name} {dtype}: fraction of copy speed")
        axis.set_xlabel("N")
        axis.legend(fontsize=6)
    plot_path = folder / "bench.png"
    figure.tight_layout()
    figure.savefig(plot_path, dpi=110)
    written.append(plot_path)
    return written
