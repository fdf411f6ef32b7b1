"""``autotuner bench``: the dispatched ``softmax`` against a copy of the same bytes, ``torch.softmax``,
and QuACK / Liger where importable, all timed the same way in one process (CUDA events, L2 flushed
before each timed call, median). The copy is the faster of torch's ``copy_`` and a plain vector copy
(``autotuner.measure.copy_reference``). Runs in-process: it measures the product, not candidates, so a
faulting kernel here is a bug to fix, not a row to record.
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


def bench_shapes(shapes: Iterable[tuple[int, int, str]], method: str = "cold", progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    import torch

    from autotuner import select_kernel, softmax
    from autotuner.measure import copy_reference
    from autotuner.timing import Timer

    timer = Timer(method, time_cap_s=0.3)
    rows = []
    for m, n, dtype in shapes:
        x = random_input(m, n, dtype)
        out = torch.empty_like(x)
        row: dict[str, Any] = {"dtype": dtype, "m": m, "n": n}
        row["copy_us"] = copy_reference(timer, x, out).median_us
        choice = select_kernel(m, n, dtype)
        row["dispatched"] = f"{choice.variant}[{choice.config_key}]"
        checked = check_softmax(softmax(x), x, dtype)
        row["dispatched_us"] = timer.time(lambda: softmax(x)).median_us if checked.ok else None
        for name, launch in peer_launchers(dtype, n).items():
            try:
                peer_out = torch.full_like(x, float("nan"))
                launch(x, peer_out)
                result = check_softmax(peer_out, x, dtype)
                row[f"{name}_us"] = timer.time(lambda f=launch: f(x, peer_out)).median_us if result.ok else "WRONG"
            except Exception as exc:  # peers fail on some shapes (QuACK at N=50257): record, go on
                row[f"{name}_us"] = f"ERR:{type(exc).__name__}"
        rows.append(row)
        if progress:
            progress(f"{dtype} {m}x{n}: copy {row['copy_us']:.2f} us, dispatched {row['dispatched_us']} us")
        del x, out
        torch.cuda.empty_cache()
    return rows


def fraction(row: dict[str, Any], column: str) -> float | None:
    value = row.get(column)
    return row["copy_us"] / value if isinstance(value, float) and value > 0 else None


def summarize(rows: Sequence[dict[str, Any]], tolerance: float = 0.03) -> dict[str, Any]:
    """Geomean / min fraction of copy speed of the dispatch, and how often it is within ``tolerance``
    of the best of torch / QuACK / Liger on the same shape."""
    fractions = [f for f in (fraction(r, "dispatched_us") for r in rows) if f]
    within = compared = 0
    for row in rows:
        peers = [row[c] for c in ("torch_us", "quack_us", "liger_us") if isinstance(row.get(c), float)]
        if peers and isinstance(row.get("dispatched_us"), float):
            compared += 1
            within += row["dispatched_us"] <= min(peers) * (1 + tolerance)
    return {
        "shapes": len(rows), "geomean": math.exp(sum(map(math.log, fractions)) / len(fractions)) if fractions else None,
        "min": min(fractions) if fractions else None,
        "within_3pct_of_best_peer": f"{within}/{compared}",
    }


def write_outputs(rows: Sequence[dict[str, Any]], folder: Path, gpu_name: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    columns = ["dtype", "m", "n", "copy_us", "dispatched_us", "dispatched", "torch_us", "quack_us", "liger_us"]
    csv_path = folder / "bench.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    written = [csv_path]
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
