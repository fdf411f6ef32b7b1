"""The dispatch table document and the lookup it answers. Pure Python: no torch, no CuPy.

A table is versioned JSON, one per (GPU model, dtype, timing method)::

    {"format_version": 1, "gpu": "h100", "gpu_name": "...", "dtype": "bf16", "timing_method": "cold",
     "rule": "interp-log",
     "candidates": [{"variant": "cuda_block_online", "config": {"block": 256, ...},
                     "config_key": "block=256,...", "constraints": {"n_max": 8192}}, ...],
     "points": [{"m": 1, "n": 1024, "copy_us": 3.6, "times": [4.1, null, ...]}, ...],
     "regret": {"geomean": 1.01, "p95": 1.04, "max": 1.09, "method": "leave-one-out"},
     "created_at": "...", "source_runs": [3], "environment": {...}}

``times[i]`` is candidate i's median time in µs at that point (null: not measured, unsupported or
failed). Lookup rules:

- ``nearest-log``: the measured point nearest in (log2 M, log2 N); among candidates whose constraints
  admit the *exact* shape, the fastest there; if none there, the next nearest point.
  Example: table points at N=4096 and N=8192, query N=5000 → the N=4096 point (|log2 5000/4096| =
  0.29 < 0.71) but only candidates whose ``n_max`` ≥ 5000 and whose ``n_multiple_of`` divides 5000.
- ``interp-log``: every candidate's time is predicted by bilinear interpolation of log time in
  (log2 M, log2 N) between the bracketing measured grid lines (clamped outside the grid), using only
  points of the same N alignment class (N % 8 == 0, or not) when that class's points surround N; the fastest
  predicted admissible candidate wins. A candidate missing at a corner is predicted from the corners
  it has; a candidate with none is not chosen. Exact measured points answer with their winner.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

FORMAT_VERSION = 1
RULES = ("nearest-log", "interp-log")


class TableFormatError(ValueError):
    """A table document that this program cannot read, with what is wrong in it."""


def admits(constraints: Mapping[str, int], m: int, n: int) -> bool:
    """The data form of ``Variant.supports`` for one config (see ``kernels.base.check_constraints``)."""
    if n < constraints.get("n_min", 1) or n > constraints.get("n_max", n):
        return False
    if n % constraints.get("n_multiple_of", 1):
        return False
    return constraints.get("m_min", 0) <= m <= constraints.get("m_max", m)


def alignment_class(n: int) -> int:
    """N classes kept apart by the interpolation: vectorised kernels behave differently on them."""
    return 0 if n % 8 == 0 else 1


@dataclass(frozen=True)
class Pick:
    candidate: int  # index into the table's candidates
    predicted_us: float | None
    exact: bool  # the shape itself was measured


class DispatchTable:
    """A loaded, validated table document with precomputed indexes for fast lookups."""

    def __init__(self, document: Mapping[str, Any]):
        self.document = validate(document)
        self.gpu: str = document["gpu"]
        self.dtype: str = document["dtype"]
        self.timing_method: str = document.get("timing_method", "cold")
        self.rule: str = document.get("rule", "nearest-log")
        self.candidates: list[dict[str, Any]] = list(document["candidates"])
        self.points: list[dict[str, Any]] = list(document["points"])
        self._exact = {(p["m"], p["n"]): p for p in self.points}
        self._by_class: dict[int, list[dict[str, Any]]] = {}
        for point in self.points:
            self._by_class.setdefault(alignment_class(point["n"]), []).append(point)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.gpu, self.dtype, self.timing_method)

    def admissible(self, m: int, n: int) -> list[int]:
        return [i for i, c in enumerate(self.candidates) if admits(c.get("constraints", {}), m, n)]

    def lookup(self, m: int, n: int) -> Pick | None:
        """The candidate this table chooses for (m, n), or None if no admissible candidate has data."""
        allowed = self.admissible(m, n)
        if not allowed:
            return None
        point = self._exact.get((m, n))
        if point is not None:
            best = _fastest(point["times"], allowed)
            if best is not None:
                return Pick(best, point["times"][best], True)
        if self.rule == "interp-log":
            return self._interpolated(m, n, allowed)
        return self._nearest(m, n, allowed)

    def _points_for(self, n: int) -> list[dict[str, Any]]:
        """Points of n's alignment class when they surround n on the N axis; otherwise all points (a
        class measured at one N, say only 50257, says nothing about N = 2500)."""
        same = self._by_class.get(alignment_class(n))
        if same and min(p["n"] for p in same) <= n <= max(p["n"] for p in same):
            return same
        return self.points

    def _nearest(self, m: int, n: int, allowed: Sequence[int]) -> Pick | None:
        lm, ln = _log2(m), _log2(n)
        ranked = sorted(self._points_for(n), key=lambda p: (_log2(p["m"]) - lm) ** 2 + (_log2(p["n"]) - ln) ** 2)
        for point in ranked:
            best = _fastest(point["times"], allowed)
            if best is not None:
                return Pick(best, point["times"][best], False)
        return None

    def _interpolated(self, m: int, n: int, allowed: Sequence[int]) -> Pick | None:
        points = self._points_for(n)
        grid = {(p["m"], p["n"]): p for p in points}
        ms = sorted({p["m"] for p in points})
        ns = sorted({p["n"] for p in points})
        (m0, m1, wm), (n0, n1, wn) = _bracket(ms, m), _bracket(ns, n)
        corners = [((m0, n0), (1 - wm) * (1 - wn)), ((m0, n1), (1 - wm) * wn),
                   ((m1, n0), wm * (1 - wn)), ((m1, n1), wm * wn)]
        best: tuple[float, int] | None = None
        for index in allowed:
            total_weight, log_time = 0.0, 0.0
            for corner, weight in corners:
                point = grid.get(corner)
                time = point["times"][index] if point is not None else None
                if time is not None and time > 0 and weight > 0:
                    total_weight += weight
                    log_time += weight * math.log(time)
            if total_weight <= 0:
                continue
            predicted = math.exp(log_time / total_weight)
            if best is None or predicted < best[0]:
                best = (predicted, index)
        if best is None:
            return self._nearest(m, n, allowed)
        return Pick(best[1], best[0], False)


def _log2(value: int) -> float:
    return math.log2(max(int(value), 1))


def _fastest(times: Sequence[float | None], allowed: Iterable[int]) -> int | None:
    best = None
    for index in allowed:
        time = times[index]
        if time is not None and (best is None or time < times[best]):
            best = index
    return best


def _bracket(values: Sequence[int], x: int) -> tuple[int, int, float]:
    """Grid values around x and x's weight toward the upper one in log2 space (clamped)."""
    if x <= values[0]:
        return values[0], values[0], 0.0
    if x >= values[-1]:
        return values[-1], values[-1], 0.0
    upper = bisect.bisect_left(values, x)
    lo, hi = values[upper - 1], values[upper]
    if hi == x:
        return hi, hi, 0.0
    return lo, hi, (_log2(x) - _log2(lo)) / (_log2(hi) - _log2(lo))


def validate(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check a table document's shape; raise :class:`TableFormatError` naming the first problem."""
    if not isinstance(document, Mapping):
        raise TableFormatError("a dispatch table must be a JSON object")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise TableFormatError(f"table format_version {version!r} is not supported (this program reads {FORMAT_VERSION})")
    for field in ("gpu", "dtype", "candidates", "points"):
        if field not in document:
            raise TableFormatError(f"table lacks the field {field!r}")
    if document.get("rule", "nearest-log") not in RULES:
        raise TableFormatError(f"table rule {document.get('rule')!r} is not one of {RULES}")
    count = len(document["candidates"])
    for candidate in document["candidates"]:
        if "variant" not in candidate or "config" not in candidate:
            raise TableFormatError("every candidate needs 'variant' and 'config'")
    for point in document["points"]:
        if len(point.get("times", ())) != count:
            raise TableFormatError(f"point (m={point.get('m')}, n={point.get('n')}) has {len(point.get('times', ()))} times for {count} candidates")
    return document
