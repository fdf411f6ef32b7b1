"""Speed-of-light reports from the database: per shape, our best kernel against a copy of the same bytes.

"Own" variants are ours (CUDA and Triton backends); torch and third-party peers are reported beside
them but never counted as ours. Fraction of speed of light = copy time / kernel time (1.0 = a softmax
as fast as moving its bytes once).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from sqlalchemy.orm import Session

from db import queries

OWN_BACKENDS = ("cuda", "triton", "cute")
BIG_TENSOR_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class ShapeReport:
    dtype: str
    m: int
    n: int
    copy_us: float | None
    best_own_us: float | None
    best_own: str | None
    torch_us: float | None
    peers: dict[str, float]

    @property
    def fraction(self) -> float | None:
        if self.copy_us and self.best_own_us:
            return self.copy_us / self.best_own_us
        return None

    @property
    def tensor_bytes(self) -> int:
        return self.m * self.n * (4 if self.dtype == "fp32" else 2)


def backend_of(variant_name: str) -> str:
    from kernels import get_variant

    try:
        return get_variant(variant_name).backend
    except KeyError:
        return "unknown"


def shape_reports(session: Session, gpu_key: str, timing_method: str = "cold",
                  dtypes: Iterable[str] | None = None) -> list[ShapeReport]:
    """One report per measured (dtype, m, n), newest time per candidate."""
    wanted = set(dtypes) if dtypes else None
    newest: dict[tuple[str, int, int, str, str], float] = {}
    for measurement, candidate, _run in queries.measurements_for(session, gpu_key, timing_method=timing_method):
        if measurement.status != "ok" or not measurement.median_us or (wanted and measurement.dtype not in wanted):
            continue
        key = (measurement.dtype, measurement.m, measurement.n, candidate.variant, candidate.config_key)
        newest.setdefault(key, measurement.median_us)
    copies: dict[tuple[str, int, int], float] = {}
    for copy in queries.copy_references_for(session, gpu_key, timing_method=timing_method):
        copies.setdefault((copy.dtype, copy.m, copy.n), copy.median_us)
    backends: dict[str, str] = {}
    shapes: dict[tuple[str, int, int], dict[str, Any]] = {}
    for (dtype, m, n, variant, config_key), time_us in newest.items():
        backend = backends.setdefault(variant, backend_of(variant))
        entry = shapes.setdefault((dtype, m, n), {"own": None, "torch": None, "peers": {}})
        if backend in OWN_BACKENDS:
            if entry["own"] is None or time_us < entry["own"][0]:
                entry["own"] = (time_us, f"{variant}[{config_key}]")
        elif variant == "torch_softmax":
            entry["torch"] = time_us if entry["torch"] is None else min(entry["torch"], time_us)
        else:
            entry["peers"][variant] = min(entry["peers"].get(variant, math.inf), time_us)
    reports = []
    for (dtype, m, n), entry in sorted(shapes.items()):
        own = entry["own"]
        reports.append(ShapeReport(dtype, m, n, copies.get((dtype, m, n)), own[0] if own else None,
                                   own[1] if own else None, entry["torch"], entry["peers"]))
    return reports


def summary(reports: Sequence[ShapeReport]) -> dict[str, Any]:
    """Geomean and minimum fraction of speed of light, overall and on tensors of 64 MB or more."""
    fractions = [r.fraction for r in reports if r.fraction]
    big = [r.fraction for r in reports if r.fraction and r.tensor_bytes >= BIG_TENSOR_BYTES]
    worst = min((r for r in reports if r.fraction), key=lambda r: r.fraction, default=None)
    return {
        "shapes": len(fractions),
        "geomean": math.exp(sum(map(math.log, fractions)) / len(fractions)) if fractions else None,
        "min": min(fractions) if fractions else None,
        "worst_shape": f"{worst.dtype} {worst.m}x{worst.n}" if worst else None,
        "big_min": min(big) if big else None,
        "big_shapes": len(big),
    }


def report_document(gpu: str, method: str, reports: Sequence[ShapeReport]) -> dict[str, Any]:
    """``autotuner report --json``: every shape's figures and, per dtype, :func:`summary`'s."""
    return {
        "gpu": gpu, "timing_method": method,
        "shapes": [{**asdict(r), "fraction": r.fraction} for r in reports],
        "summary": {dtype: summary([r for r in reports if r.dtype == dtype]) for dtype in sorted({r.dtype for r in reports})},
    }


def markdown(reports: Sequence[ShapeReport]) -> str:
    lines = ["| dtype | M | N | copy µs | best own µs | fraction | torch µs | best own variant |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        def fmt(value: float | None, digits: int = 2) -> str:
            return f"{value:.{digits}f}" if value is not None else "-"
        lines.append(f"| {r.dtype} | {r.m} | {r.n} | {fmt(r.copy_us)} | {fmt(r.best_own_us)} | {fmt(r.fraction)} | "
                     f"{fmt(r.torch_us)} | {r.best_own or '-'} |")
    return "\n".join(lines)
