"""Which stored rows ``autotuner sweep --retime-unstable F`` measures again.

A timing can be disturbed for its whole duration (another process on the GPU, a clock change), and
then a fit reads a median many times the kernel's real time. Two signs are checked, per (candidate,
shape), on the best ok row stored for it:
- spread: its p80 exceeds F x its p20;
- monotonicity: it is more than SLOWER_THAN_LARGER x the same candidate's best time at a larger shape
  of the same dtype (M' >= M and N' >= N, not the same shape). More work does not take a third of
  the time; alignment (odd N) and wave effects stay well inside that factor.
A key with a failed row (wrong, fault, ...) is never retimed: the failure stands.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from autotuner.tune.timing import is_unstable

SLOWER_THAN_LARGER = 3.0
CHUNK = 1024  # points compared against the whole series at once: 1024 x len(series) booleans and floats

Key = tuple[int, int, int, str]  # (candidate_id, m, n, dtype)


def retime_keys(rows: Iterable[tuple], spread: float) -> set[Key]:
    """Keys to measure again. ``rows``: (candidate_id, m, n, dtype, status, median_us, p20_us, p80_us)."""
    best: dict[Key, tuple[float, float | None, float | None]] = {}
    failed: set[Key] = set()
    for candidate_id, m, n, dtype, status, median, p20, p80 in rows:
        key = (candidate_id, m, n, dtype)
        if status != "ok" or not median:
            failed.add(key)
        elif key not in best or median < best[key][0]:
            best[key] = (median, p20, p80)
    flagged = {key for key, (_, p20, p80) in best.items() if is_unstable(p20, p80, spread)}
    by_series: dict[tuple[int, str], list[tuple[int, int, float]]] = {}
    for (candidate_id, m, n, dtype), (median, _, _) in best.items():
        by_series.setdefault((candidate_id, dtype), []).append((m, n, median))
    for (candidate_id, dtype), points in by_series.items():
        flagged |= {(candidate_id, m, n, dtype) for m, n in slower_than_larger(points)}
    return flagged - failed


def slower_than_larger(points: Iterable[tuple[int, int, float]]) -> set[tuple[int, int]]:
    """The shapes (m, n) of one candidate's series of (m, n, time) whose time is more than
    ``SLOWER_THAN_LARGER`` x its best time at a larger shape (M' >= M, N' >= N, not the same): a
    timing disturbed for its whole duration (the monotonicity sign above; the fit leaves them out).
    Every pair of points is compared, as arrays (a fit and a prediction ask this of every candidate's
    series), ``CHUNK`` points at a time so that memory stays bounded."""
    points = list(points)
    if len(points) < 2:
        return set()
    columns = list(zip(*points))
    ms, ns = np.array(columns[0], dtype=np.int64), np.array(columns[1], dtype=np.int64)
    times = np.array(columns[2], dtype=np.float64)
    flagged: set[tuple[int, int]] = set()
    for start in range(0, len(points), CHUNK):
        m, n = ms[start:start + CHUNK, None], ns[start:start + CHUNK, None]
        larger = (ms >= m) & (ns >= n) & ((ms != m) | (ns != n))
        best = np.where(larger, times, np.inf).min(axis=1)
        for offset in np.flatnonzero(times[start:start + CHUNK] > SLOWER_THAN_LARGER * best).tolist():
            flagged.add(points[start + offset][:2])
    return flagged
