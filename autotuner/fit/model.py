"""A table's answer for any shape: its lookup rule inside the measured domain, a per-candidate
scaling model outside it, and ``torch_softmax`` where nothing measured vouches for a candidate.

The measured domain of a table is N from its smallest to its largest measured N and M from 0 to its
largest measured M. Inside it, ``RuleTable.lookup`` answers (rule ``table``: the measured
winner, or the local-regret prediction between measured points), so in-grid picks are the fit's.

Outside it (rule ``model``), each candidate's time is read from its own measurements, first along N
on every measured row M, then along M across those rows, by :func:`scaled`:

- between two measured points: interpolation of log time in log size;
- past the largest measured size x2: t(x) = t(x2) (x / x2)^s, with s the candidate's measured
  exponent between its two largest sizes x1 < x2 on that line, floored at 0. A candidate whose time
  grew faster than the work there (s > ``SCALE_LIMIT``: it is falling off a capacity cliff) is not
  extrapolated: nothing measured vouches for it past x2. A candidate measured at one size only
  (on that line) is taken to scale with the work (s = 1), the most a kernel within its capacity
  (its constraints admit the shape) was seen to grow;
- past a row's largest measured N by more than ``CLAMP_REACH`` (4x), where other rows measured the
  candidate at larger N: no value on that row (the rows that measured it further say more);
- below the smallest measured size: no value. A kernel's cost per row does not shrink below its
  capacity (a block of 512 threads spends as long on a row of 64 as on one of 1024), so rows shorter
  than any measured one are not predicted from longer ones.

Between measured points inside the domain, ``predicted_us`` of the table rule's pick is also this
model's (where it has one). The prediction is at least the bytes the shape moves (read + write) at the best bandwidth the
table's copy kernel reached, so ``predicted_us`` grows with the work. Which candidate answers: past
the N edge, the fastest predicted; past the M edge only, the table rule's pick among the candidates
with a prediction (its ranking at the edge row). If no candidate has a prediction, the answer is
``torch_softmax`` (rule ``outside-measured``). Examples (H100 fp32 table, N measured 1024..262144, M up to 16384):
(16384, 64) and (200000, 64) answer ``torch_softmax`` (N below every measured N); (200000, 4096)
answers the table rule's pick at (16384, 4096), its time scaled by its measured M exponent (about
12x); (1, 1048576) answers among candidates admitting N = 2^20 whose time grew no faster than N
from 151936 to 262144 on the measured rows.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Container, Sequence

from autotuner.fit.regret import CLAMP_REACH
from autotuner.fit.rule import RuleTable

SCALE_LIMIT = 1.15  # exponent past which a candidate's growth is a cliff, not scaling (noise: ~0.1)
# (candidate, N) pairs whose rows past the largest M are kept per model: an index build asks ~650,000
# times for ~21,000 pairs (H100 bf16), and a bound keeps a long-lived table's model small
PAST_KEPT = 1 << 16
_UNSEEN = object()


@dataclass(frozen=True)
class Answer:
    """A table's answer: ``candidate`` is None for ``torch_softmax``; ``rule`` names what answered
    (``table``, ``model``, ``outside-measured``, ``no-candidate``) and ``reason`` says why for the
    last two."""

    candidate: int | None
    predicted_us: float | None
    exact: bool
    rule: str
    reason: str = ""


def answer(table: RuleTable, m: int, n: int, usable: Container[int] | None = None) -> Answer:
    """The table's answer for (m, n) among the ``usable`` candidates (default: all)."""
    return Answer(*answer_fields(table, m, n, usable))


def answer_fields(table: RuleTable, m: int, n: int,
                  usable: Container[int] | None = None) -> tuple[int | None, float | None, bool, str, str]:
    """:func:`answer`'s fields as a tuple: the index build builds no object it does not use."""
    model = table.__dict__.get("_scaling_model") or _model_of(table)
    if usable is None or type(usable) is frozenset:
        allowed: Sequence[int] = table.allowed(m, n, usable)
    else:
        allowed = [i for i in table.admissible(m, n) if i in usable]
    if not allowed:
        return None, None, False, "no-candidate", \
            f"no candidate of the {_where(table)} admits ({m}, {n}) and runs on this GPU"
    if model.n_lo <= n <= model.n_hi and m <= model.m_hi:  # inside the measured domain
        pick = table.choose(m, n, allowed, estimate=False)
        if pick is None:
            return None, None, False, "no-candidate", \
                f"no candidate of the {_where(table)} that admits ({m}, {n}) was measured near it"
        candidate, predicted, exact = pick
        if exact:
            return candidate, predicted, True, "table", ""
        # between measured points the pick is the table rule's, its time the scaling model's (the
        # rule's own estimate, asked for only where the model has none, reads the pick's time at the
        # neighbours where it was measured, which need not bracket the shape: flat in M where only a
        # smaller row measured it, so it is floored by the bytes as the model's times are: H200 fp16
        # 10257 x 349210 had been given the 409 us of its M = 1000 neighbour, 7 GB at 17 TB/s)
        time = model.time(candidate, m, n)
        if not time:  # the rule's estimate, or the nearest point's time where the rule fell back to it
            predicted = max(table.estimate(m, n, candidate) if predicted is None else predicted, model.floor(m, n))
        return candidate, time or predicted, False, "table", ""
    times = {i: time for i in allowed if (time := model.time(i, m, n)) is not None}
    # past the largest M only, the table rule ranks (at the edge row) the candidates the model
    # vouches for: once every SM is busy the ranking holds; past the N edge the fastest prediction
    # wins, since a row's length against each candidate's capacity reorders them (the scores that
    # chose this: docs/DESIGN.md, "Outside the measured points")
    pick = table.lookup(m, n, times) if times and model.n_lo <= n <= model.n_hi else None
    if pick is not None:
        return pick.candidate, times[pick.candidate], False, "model", ""
    if not times:
        return None, None, False, "outside-measured", \
            (f"({m}, {n}) is outside the {_where(table)}'s measured N {model.n_lo}..{model.n_hi}, "
             f"M <= {model.m_hi}, and no candidate was seen to scale there")
    best = min(times, key=lambda i: (times[i], i))
    return best, times[best], False, "model", ""


def _where(table: RuleTable) -> str:
    return f"{table.gpu} {table.dtype}/{table.timing_method} table"


def scaled(series: Sequence[tuple[int, float]], x: int, reach: float = math.inf) -> float | None:
    """A candidate's time at size x from its measured (size, time) pairs, sorted by size (module
    docstring); None below the smallest size, past the largest where it grew faster than the work,
    or past ``reach``."""
    if not series or x < series[0][0]:
        return None
    sizes = [size for size, _ in series]
    upper = bisect.bisect_left(sizes, x)
    if upper < len(series):
        size, time = series[upper]
        if size == x or upper == 0:
            return time
        (lo, t_lo), (hi, t_hi) = series[upper - 1], series[upper]
        weight = math.log(x / lo) / math.log(hi / lo)
        return math.exp((1 - weight) * math.log(t_lo) + weight * math.log(t_hi))
    x2, t2 = series[-1]
    if x > reach:
        return None
    if len(series) < 2:  # one size measured: no exponent, so the work's (time in proportion)
        return t2 * x / x2
    # the exponent over at least a factor of 2 where measured: between 131072 and 151936, 5 % of
    # timing noise would move it by 0.3
    x1, t1 = next((pair for pair in reversed(series[:-1]) if pair[0] * 2 <= x2), series[-2])
    exponent = math.log(t2 / t1) / math.log(x2 / x1)
    if exponent > SCALE_LIMIT:
        return None
    return t2 * (x / x2) ** max(exponent, 0.0)


class _Model:
    """A table's measured domain and its candidates' measurements by row, indexed once."""

    def __init__(self, table: RuleTable):
        points = table.points
        self.n_lo = min(p["n"] for p in points)
        self.n_hi = max(p["n"] for p in points)
        self.m_hi = max(p["m"] for p in points)
        rows: dict[int, list[dict]] = {}
        for point in points:
            rows.setdefault(point["m"], []).append(point)
        self.rows = {m: sorted(same, key=lambda p: p["n"]) for m, same in sorted(rows.items())}
        self.row_ms = list(self.rows)  # ascending
        # elements moved (read + write) per microsecond by the copy kernel, at its best
        rates = [2 * p["m"] * p["n"] / p["copy_us"] for p in points if p.get("copy_us")]
        self.copy_rate = max(rates) if rates else None
        self._series: dict[tuple[int, int], list[tuple[int, float]]] = {}
        self._lines: dict[tuple[int, int], tuple] = {}
        self._edges: dict[int, int] = {}
        self._timed_rows: dict[int, tuple[list[int], list[tuple]]] = {}
        self._past: dict[tuple[int, int], tuple | None] = {}  # (candidate, n) -> _ends_below past every row

    def inside(self, m: int, n: int) -> bool:
        return self.n_lo <= n <= self.n_hi and m <= self.m_hi

    def time(self, index: int, m: int, n: int) -> float | None:
        """``scaled`` along M over the rows' times at n, reading only the rows it needs: the first row
        at or above m with a time, and below it the nearest one (or, past the largest row, the two
        that give the exponent)."""
        rows, lines = self._timed_rows.get(index) or self._timed(index)
        x, at = max(m, 1), _line_time
        start = bisect.bisect_left(rows, x)
        if start == len(rows):  # past every row: the same two rows at this n for every such m, kept
            key = (index, n)
            ends = self._past.get(key, _UNSEEN)
            if ends is _UNSEEN:
                if len(self._past) >= PAST_KEPT:
                    self._past.clear()
                ends = self._past[key] = _ends_below(rows, lines, n, start - 1)
            time = _extrapolated(ends, x)
        else:
            for k in range(start, len(rows)):  # the first row at or above x with a time
                above = at(lines[k], n)
                if above is not None:
                    hi = rows[k]
                    break
            else:
                hi = None
            if hi == x:
                time = above
            elif hi is not None:  # scaled([(lo, t_lo), (hi, above)], x) with lo < x < hi, inlined
                below = start - 1  # the rows below x, nearest first
                while below >= 0 and (t_lo := at(lines[below], n)) is None:
                    below -= 1
                if below < 0:
                    return None
                lo = rows[below]
                weight = math.log(x / lo) / math.log(hi / lo)
                time = math.exp((1 - weight) * math.log(t_lo) + weight * math.log(above))
            else:  # past the largest row with a time at n: extrapolated from it and one below
                time = _extrapolated(_ends_below(rows, lines, n, start - 1), x)
        if time is None:
            return None
        return max(time, self.floor(m, n))

    def floor(self, m: int, n: int) -> float:
        """The least time the shape can take: its bytes (read + write) at the copy's best bandwidth."""
        return 2 * m * n / self.copy_rate if self.copy_rate else 0.0

    def _timed(self, index: int) -> tuple[list[int], list[tuple]]:
        """The rows where the candidate has a time at some N, ascending, and its line on each (kept):
        ``_line_time`` is None on every other row, so ``time`` reads the same rows and answers the same
        as over all rows, without visiting the others (an index build asks ~10^6 times)."""
        rows = [row_m for row_m in self.row_ms if self._row_series(index, row_m)]
        timed = self._timed_rows[index] = (rows, [self._line(index, row_m) for row_m in rows])
        return timed

    def _line(self, index: int, row_m: int) -> tuple:
        """:func:`_line` of the candidate's series on the row, worked out once."""
        line = self._lines.get((index, row_m))
        if line is None:
            line = self._lines[(index, row_m)] = _line(self._row_series(index, row_m), self._edge(index))
        return line

    def _edge(self, index: int) -> int:
        """The largest N the candidate was measured at, on any row (0 if none)."""
        edge = self._edges.get(index)
        if edge is None:
            edge = self._edges[index] = max(
                (series[-1][0] for row_m in self.row_ms if (series := self._row_series(index, row_m))), default=0)
        return edge

    def _row_series(self, index: int, row_m: int) -> list[tuple[int, float]]:
        key = (index, row_m)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = [(p["n"], p["times"][index]) for p in self.rows[row_m]
                                          if p["times"][index] is not None and p["times"][index] > 0]
        return series


def _ends_below(rows: Sequence[int], lines: Sequence[tuple], n: int, below: int) -> tuple | None:
    """The rows ``scaled`` extrapolates from past the largest row with a time at n, searching down from
    ``below``: ((M, time) of that row, (M, time) of the nearest row at least a factor 2 below it, else
    of the next one with a time, else None); None where no row has a time at n."""
    while below >= 0 and (t_lo := _line_time(lines[below], n)) is None:
        below -= 1
    if below < 0:
        return None
    last = (rows[below], t_lo)
    second = previous = None
    for k in range(below - 1, -1, -1):
        t = _line_time(lines[k], n)
        if t is None:
            continue
        previous = previous or (rows[k], t)
        if rows[k] * 2 <= last[0]:
            second = (rows[k], t)
            break
    return last, second or previous


def _extrapolated(ends: tuple | None, x: int) -> float | None:
    """``scaled([second, last], x)`` past last's M (``[last]`` alone where there is no second), from
    ``_ends_below``'s rows; None where there are none or the growth is a cliff."""
    if ends is None:
        return None
    (x2, t2), second = ends
    if second is None:
        return t2 * x / x2
    exponent = math.log(t2 / second[1]) / math.log(x2 / second[0])
    return None if exponent > SCALE_LIMIT else t2 * (x / x2) ** max(exponent, 0.0)


def _line_time(line: tuple, n: int) -> float | None:
    """``scaled(series, n)`` from one candidate's line on one row (``_line``: its sizes, times, log
    times, log size ratios and extrapolation exponent, worked out once per candidate and row)."""
    sizes, times, log_times, log_ratios, exponent, reach = line
    if not sizes or n < sizes[0]:
        return None
    upper = bisect.bisect_left(sizes, n)
    if upper < len(sizes):
        if upper == 0 or sizes[upper] == n:
            return times[upper]
        weight = math.log(n / sizes[upper - 1]) / log_ratios[upper]
        return math.exp((1 - weight) * log_times[upper - 1] + weight * log_times[upper])
    if n > reach:  # far past this row's end, while other rows measured the candidate further
        return None
    if exponent is None:  # one size measured: the work's scaling
        return times[-1] * n / sizes[-1]
    if exponent > SCALE_LIMIT:
        return None
    return times[-1] * (n / sizes[-1]) ** max(exponent, 0.0)


def _line(series: Sequence[tuple[int, float]], edge: int) -> tuple:
    """One candidate's (size, time) series on one row as ``_line_time`` reads it: (sizes, times, log
    times, log(size / previous size), the exponent past the largest size (None where one size was
    measured), the largest size it is extrapolated to), each the value ``scaled`` computes from the
    series. ``edge`` is the largest size the candidate was measured at on any row: a row that ends
    there extrapolates without bound (past the table's N edge every row does), one that ends short
    of it only up to ``CLAMP_REACH`` times its end, since rows measured further say more of the
    query (a row of the domain sweep measured at N = 3 alone had put 262 ms at 1448 x 30522)."""
    sizes = [size for size, _ in series]
    times = [time for _, time in series]
    log_ratios = [None, *(math.log(hi / lo) for lo, hi in zip(sizes, sizes[1:]))]
    exponent = None
    if len(series) >= 2:
        x2, t2 = series[-1]
        x1, t1 = next((pair for pair in reversed(series[:-1]) if pair[0] * 2 <= x2), series[-2])
        exponent = math.log(t2 / t1) / math.log(x2 / x1)
    reach = math.inf if not sizes or sizes[-1] >= edge else sizes[-1] * CLAMP_REACH
    return sizes, times, [math.log(time) for time in times], log_ratios, exponent, reach


def _model_of(table: RuleTable) -> _Model:
    """The table's model, built on its first answer and kept on the table (which is immutable)."""
    model = table.__dict__.get("_scaling_model")
    if model is None:
        model = table.__dict__["_scaling_model"] = _Model(table)
    return model
