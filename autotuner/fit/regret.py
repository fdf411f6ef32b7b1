"""The local-regret rules' arithmetic (``autotuner/fit/rule.py``'s module docstring states the
rules): a query's measured neighbours and their weights (:func:`stencil`), and the candidate the fit
of log regrets over them chooses (:func:`plan`, :func:`best`).

The rule runs at fit and convert time only (``autotuner/fit/index.py`` evaluates it over the whole
domain to write a table's decision index), hundreds of thousands of times a table, so the work is
split by what it depends on and only what depends on the exact shape is done per query:

- the neighbours' weights, per lookup; inside a fully measured cell, or on a line between two
  measured points of it, from a closed form kept per such place (:meth:`Layout.cell`), elsewhere
  line by line (:func:`stencil_by_lines`);
- which allowed candidates are complete, partial or left out for a gap there, the partial ones
  grouped by the neighbours they were measured at (the fit moves a group's members by one offset,
  so :func:`fit_offsets` runs over groups, not candidates), and which candidates cannot win whatever
  the weights: a :func:`plan`, kept by the table per (neighbours, allowed candidates), which the
  shapes of one cell share.

Every float the rule computes is computed by the same operations in the same order (sums by ``sum``
over the same sequence), so the answers are the rule's own to the last bit whichever way they are
reached (tests/autotuner/test_regret.py compares them).
"""
from __future__ import annotations

import bisect
import math
import operator
from typing import Any, Callable, Iterable, Mapping, Sequence


FIT_PASSES = 2  # neighbour-effect updates (more change no pick on the recorded sweeps)
# local-regret-clamped reads a row (one M, along N) that ends before the query's N at its nearest end
# only while that end is within this factor of the query's N: a query far past a row's end (2 x 2.5M
# read at (2, 262144), where a long-row kernel was never swept) would otherwise let that distant point
# veto the kernels measured around the query itself. Between two measured points of a line, too, a
# point farther than this from the query is not read (``_within_reach``).
CLAMP_REACH = 4
# The same for columns (one N, along M), with a wider reach: M changes a kernel's ranking more slowly
# than N (rows per CTA and waves, not the row's fit in registers), and past the largest measured M the
# time model extrapolates from the columns. Beyond this factor a column says nothing of the query: the
# domain sweep's odd-N columns measured at M = 2 and 5 alone had made 1500 x 30522 pick a cluster
# config tuned for two rows (bf16: 103 us against 69 us for the pick of the tables before, H100).
# Leave-one-out on the H100 recordings: 1.0134 / 1.0222 / 1.0252 -> 1.0144 / 1.0214 / 1.0249 (fp32 /
# fp16 / bf16); a reach of 4 was worse on all three (1.0182 / 1.0282 / 1.0314).
COLUMN_REACH = 16
# A candidate whose smallest log regret over the neighbours exceeds another's weighted mean (or its
# largest log regret) by more than this has the larger weighted mean whatever the weights: they are
# positive and sum to 1, so a mean lies between the smallest and the largest value, to within the
# rounding of a few additions (~1e-15; log regrets lie in [0, log REGRET_CAP]).
_DOMINATED = 1e-9
_mul = operator.mul


def log2_or_zero(value: int) -> float:
    return math.log2(value) if value > 1 else 0.0


class Layout:
    """Measured points as lines: M -> sorted N measured on that row, N -> sorted M on that column."""

    def __init__(self, points: Sequence[Mapping[str, Any]]):
        self.rows: dict[int, list[int]] = {}
        self.cols: dict[int, list[int]] = {}
        for point in points:
            self.rows.setdefault(point["m"], []).append(point["n"])
            self.cols.setdefault(point["n"], []).append(point["m"])
        for lines in (self.rows, self.cols):
            for values in lines.values():
                values.sort()
        self.row_keys = sorted(self.rows)
        self.col_keys = sorted(self.cols)
        self.log2 = {v: log2_or_zero(v) for v in (*self.row_keys, *self.col_keys)}  # for log_bracket
        # the N range within CLAMP_REACH of each row's ends, which the clamped rule reads the row in
        self.row_reach = {m: (ns[0] / CLAMP_REACH, ns[-1] * CLAMP_REACH) for m, ns in self.rows.items()}
        self.col_reach = {n: (ms[0] / COLUMN_REACH, ms[-1] * COLUMN_REACH) for n, ms in self.cols.items()}
        self.cells: dict[tuple[int, bool, int, bool], tuple | None] = {}

    def cell(self, key: tuple[int, bool, int, bool]) -> tuple | None:
        """Where a query lies among the lines, as ``key`` = (its M's ``bisect_left`` in ``row_keys``,
        whether M is a row, the same for N in ``col_keys``), if :func:`stencil` has a closed form there
        (kept per key; only where the cell's sides are within ``CLAMP_REACH`` along N and ``COLUMN_REACH``
        along M, so that :func:`_within_reach` drops no point of it): strictly inside a cell whose
        four corners were measured, (sorted corners, log2
        of the lower row, log2 gap of the rows, the same for the columns); on a line between two
        adjacent measured points of it, (sorted corners, whether the line is a row, log2 of the lower
        point, log2 gap). Lower lines are at least 1, so every weight is positive. Else None."""
        found = self.cells.get(key, False)
        if found is False:
            found = self.cells[key] = self._closed_form(*key)
        return found

    def _closed_form(self, upper_m: int, m_on: bool, upper_n: int, n_on: bool) -> tuple | None:
        rows, logs = self.rows, self.log2
        inside_m, inside_n = 0 < upper_m < len(self.row_keys), 0 < upper_n < len(self.col_keys)
        if not m_on and not n_on and inside_m and inside_n:
            (r0, r1), (c0, c1) = self.row_keys[upper_m - 1:upper_m + 1], self.col_keys[upper_n - 1:upper_n + 1]
            if (r0 >= 1 and all(c in rows[r] for r in (r0, r1) for c in (c0, c1))
                    and c1 <= c0 * CLAMP_REACH and r1 <= r0 * COLUMN_REACH):
                return (((r0, c0), (r0, c1), (r1, c0), (r1, c1)), logs[r0], logs[r1] - logs[r0],
                        logs[c0], logs[c1] - logs[c0])
        elif m_on and not n_on and inside_n:  # on the row M, between two of its columns
            row, (c0, c1) = self.row_keys[upper_m], self.col_keys[upper_n - 1:upper_n + 1]
            if c0 in rows[row] and c1 in rows[row] and c1 <= c0 * CLAMP_REACH:
                return ((row, c0), (row, c1)), True, logs[c0], logs[c1] - logs[c0]
        elif n_on and not m_on and inside_m:  # on the column N, between two of its rows
            column, (r0, r1) = self.col_keys[upper_n], self.row_keys[upper_m - 1:upper_m + 1]
            if r0 >= 1 and column in rows[r0] and column in rows[r1] and r1 <= r0 * COLUMN_REACH:
                return ((r0, column), (r1, column)), False, logs[r0], logs[r1] - logs[r0]
        return None


def log_bracket(values: Sequence[int], x: int, log_x: float, logs: Mapping[int, float]) -> list[tuple[int, float]]:
    """The values around x with linear weights in log2 space (the end value if x is outside); the
    log2 of x and of every value are given, since the index build asks for it per query."""
    if x <= values[0]:
        return [(values[0], 1.0)]
    if x >= values[-1]:
        return [(values[-1], 1.0)]
    upper = bisect.bisect_left(values, x)
    lo, hi = values[upper - 1], values[upper]
    if hi == x:
        return [(hi, 1.0)]
    weight = (log_x - logs[lo]) / (logs[hi] - logs[lo])
    return [(lo, 1.0 - weight), (hi, weight)]


def stencil(layout: Layout, m: int, n: int, clamped: bool) -> tuple[tuple[tuple[int, int], ...], list[float]]:
    """The neighbours of (m, n), sorted, and their weights (summing to 1); empty if none. The mean of
    the interpolation along N on the rows bracketing M and along M on the columns bracketing N; the
    clamped rule brackets among the lines it can read there (a row only within ``CLAMP_REACH`` of its
    ends, a column within ``COLUMN_REACH``: :func:`_along_lines`), the other
    only among lines that span the query on the other axis. Inside a fully measured cell, or on a line
    between two measured points, from the closed form kept for that place (:meth:`Layout.cell`),
    which is the same arithmetic; elsewhere :func:`stencil_by_lines`."""
    log_m, log_n = log2_or_zero(m), log2_or_zero(n)
    row_keys, col_keys = layout.row_keys, layout.col_keys
    upper_m, upper_n = bisect.bisect_left(row_keys, m), bisect.bisect_left(col_keys, n)
    key = (upper_m, upper_m < len(row_keys) and row_keys[upper_m] == m,
           upper_n, upper_n < len(col_keys) and col_keys[upper_n] == n)
    cell = layout.cells.get(key, False)
    if cell is False:
        cell = layout.cell(key)
    if cell is not None:
        if len(cell) == 5:
            return _in_cell(cell, log_m, log_n)
        corners, on_row, log_lo, gap = cell
        return _on_line(corners, ((log_n if on_row else log_m) - log_lo) / gap)
    return stencil_by_lines(layout, m, n, clamped)


def stencil_by_lines(layout: Layout, m: int, n: int, clamped: bool) -> tuple[tuple[tuple[int, int], ...], list[float]]:
    """:func:`stencil` as the rule states it, line by line, for any query (``stencil`` answers from
    its closed forms where they apply)."""
    log_m, log_n = log2_or_zero(m), log2_or_zero(n)
    weights: dict[tuple[int, int], float] = {}
    # along N on the rows around M, then along M on the columns around N
    _along_lines(weights, layout.row_keys, layout.rows, layout.row_reach, m, log_m, n, log_n, layout.log2,
                 clamped, rows=True)
    _along_lines(weights, layout.col_keys, layout.cols, layout.col_reach, n, log_n, m, log_m, layout.log2,
                 clamped, rows=False)
    total = sum(weights.values())
    if not total > 0:
        return (), []
    ordered = sorted(weights.items())
    return tuple(corner for corner, _ in ordered), [weight / total for _, weight in ordered]


def _along_lines(weights: dict[tuple[int, int], float], keys: Sequence[int], lines: Mapping[int, list[int]],
                 reach: Mapping[int, tuple[float, float]], at: int, log_at: float, across: int,
                 log_across: float, logs: Mapping[int, float], clamped: bool, rows: bool) -> None:
    """One axis of :func:`stencil_by_lines`: the lines (rows if ``rows``, else columns) bracketing the
    query's ``at`` on their own axis, each interpolated at ``across`` along itself, added to
    ``weights`` normalised (corners as (m, n)). The clamped rule brackets among the lines it can read
    at ``across``: a line whose measured values end more than its ``reach`` from ``across``, or whose
    two values around it both lie farther than that, says nothing of the query, and neither does it
    hide a farther line that does (a row measured at one N, far from the query's, between the query
    and a row measured all along). The unclamped rule brackets only among lines that span ``across``.
    A line's corners are distinct, so each is set once."""
    factor = CLAMP_REACH if rows else COLUMN_REACH
    read: dict[int, list[tuple[int, float]]] = {}  # line -> its values around ``across`` that the rule reads
    if clamped:
        def readable(line: int) -> bool:
            low, high = reach[line]
            if not low <= across <= high:
                return False
            bracket = log_bracket(lines[line], across, log_across, logs)
            read[line] = _within_reach(bracket, across, factor) if len(bracket) == 2 else bracket
            return bool(read[line])

        # lines are looked for along their own axis as far as a column (M) or a row end (N) is read
        keys = _nearest_readable(keys, at, COLUMN_REACH if rows else CLAMP_REACH, readable)
    else:
        keys = [k for k in keys if lines[k][0] <= across <= lines[k][-1]]
    if not keys:
        return
    corners, parts = [], []
    for line, line_weight in log_bracket(keys, at, log_at, logs):
        for value, weight in read[line] if clamped else log_bracket(lines[line], across, log_across, logs):
            corners.append((line, value) if rows else (value, line))
            parts.append(line_weight * weight)
    _add_normalised(weights, corners, parts)


def _nearest_readable(keys: Sequence[int], at: int, factor: int, readable: Callable[[int], bool]) -> list[int]:
    """The clamped rule's lines around ``at`` (sorted ``keys``): the line at ``at`` alone if
    ``readable``; else on each side the nearest readable line, looking past unreadable ones only
    while within ``factor`` of ``at`` (the nearest line on a side is looked at wherever it is, as the
    rule always has)."""
    upper = bisect.bisect_left(keys, at)
    if upper < len(keys) and keys[upper] == at and readable(at):
        return [at]
    found = []
    for step, start in ((-1, upper - 1), (1, upper)):
        index = start
        while 0 <= index < len(keys):
            line = keys[index]
            if index != start and not (line <= at * factor and at <= line * factor):
                break
            if readable(line):
                found.append(line)
                break
            index += step
    return sorted(found)


def _within_reach(bracket: list[tuple[int, float]], across: int, factor: int) -> list[tuple[int, float]]:
    """The clamped rule reads a line between two measured values (``bracket``, lower first) only at
    those within ``factor`` of ``across``, as it reads a line's end (bf16 1500 x 30522 had been read
    from N = 1431, 21x away, for a kernel whose capacity ends at 32768): the nearer alone, or none."""
    near = [(value, 1.0) for value, _ in bracket if value * factor >= across and value <= across * factor]
    return bracket if len(near) == 2 else near


def _add_normalised(weights: dict[tuple[int, int], float], corners: list, parts: list[float]) -> None:
    """Add one axis's weights, normalised to sum to 1 over that axis, to ``weights`` (positive ones
    only). On the first axis ``weights`` is empty and 0.0 + w is w exactly, so the order of axes
    changes no bit."""
    total = sum(parts)
    for corner, weight in zip(corners, parts):
        if weight > 0:
            weights[corner] = weights.get(corner, 0.0) + weight / total


def _in_cell(cell: tuple, log_m: float, log_n: float) -> tuple[tuple[tuple[int, int], ...], list[float]]:
    """:func:`stencil` strictly inside a fully measured cell, term for term: each axis brackets the
    query between the same two lines, and each of those lines between the other axis's two, so both
    interpolations read the four corners with bilinear weights (in their own order of summation)."""
    corners, log_r0, rows_gap, log_c0, cols_gap = cell
    along_m = (log_m - log_r0) / rows_gap
    along_n = (log_n - log_c0) / cols_gap
    below_m, below_n = 1.0 - along_m, 1.0 - along_n
    w00, w01, w10, w11 = below_m * below_n, below_m * along_n, along_m * below_n, along_m * along_n
    by_rows = sum((w00, w01, w10, w11))  # the rows' corners in their order: (r0, c0), (r0, c1), (r1, ...)
    by_cols = sum((w00, w10, w01, w11))  # the columns': (r0, c0), (r1, c0), (r0, c1), (r1, c1)
    w00, w01, w10, w11 = (w00 / by_rows + w00 / by_cols, w01 / by_rows + w01 / by_cols,
                          w10 / by_rows + w10 / by_cols, w11 / by_rows + w11 / by_cols)
    total = sum((w00, w01, w10, w11))
    return corners, [w00 / total, w01 / total, w10 / total, w11 / total]


def _on_line(corners: tuple[tuple[int, int], ...], along: float) -> tuple[tuple[tuple[int, int], ...], list[float]]:
    """:func:`stencil` on a line between two adjacent measured points of it, term for term: both
    interpolations read those two points (one along the line, the other across it), alike."""
    below = 1.0 - along
    per_axis = sum((below, along))  # each axis's total, the same terms in the same order
    low, high = below / per_axis + below / per_axis, along / per_axis + along / per_axis
    total = sum((low, high))
    return corners, [low / total, high / total]


def plan(log_regrets: Sequence[Sequence[float | None]], gaps: frozenset[int], allowed: Sequence[int]) -> tuple:
    """What :func:`best` needs at one set of neighbours for the ``allowed`` candidates, independent
    of the weights: (contenders, fit). ``log_regrets`` holds one row per neighbour, ``gaps`` the
    candidates with a gap at one of them.

    Where no candidate is partial (has values at some neighbours only, none of them gaps), the
    weighted means alone decide: ``contenders`` lists the complete candidates that are not dominated
    as (smallest log regret, index, log regrets), in that order, and ``fit`` is None. Otherwise
    ``contenders`` is None and ``fit`` holds what :func:`fit_offsets` and the final ranking need:
    (number of complete candidates, their sums per neighbour, the complete contenders as (index, log
    regrets), the partial candidates grouped by the neighbours they were measured at). A group is
    (neighbours, size, its members' log regrets summed per neighbour, contenders as (index, log
    regrets at those neighbours)). Contenders are the candidates not dominated within their group: a
    candidate whose smallest log regret exceeds another's largest by more than ``_DOMINATED`` has the
    larger weighted mean whatever the weights, and the fit moves every member of a group by the same
    offset."""
    columns = list(zip(*log_regrets))
    complete: list[tuple[int, tuple[float, ...]]] = []
    partial: list[tuple[int, tuple[float | None, ...]]] = []
    for i in allowed:
        values = columns[i]
        if None not in values:
            complete.append((i, values))
        elif i not in gaps:
            partial.append((i, values))
    patterns = _by_neighbours(partial)
    if not patterns:
        if not complete:
            return (), None
        ceiling = min(max(values) for _, values in complete) + _DOMINATED
        return tuple(sorted((min(values), i, values) for i, values in complete if min(values) <= ceiling)), None
    sums = _column_sums([values for _, values in complete], len(log_regrets))
    groups = tuple((where, len(members), _sums(members), _undominated(members)) for where, members in patterns.items())
    return None, (len(complete), sums, _undominated(complete), groups)


def _by_neighbours(partial: Iterable[tuple[int, Sequence[float | None]]]) -> dict[tuple[int, ...], list]:
    """Partial candidates (index, log regrets with None where not measured), in their order, grouped
    by the neighbours they were measured at: neighbours -> [(index, log regrets there)]. A candidate
    measured at none is left out."""
    patterns: dict[tuple[int, ...], list[tuple[int, tuple[float, ...]]]] = {}
    for i, values in partial:
        where = tuple(p for p, value in enumerate(values) if value is not None)
        if where:
            patterns.setdefault(where, []).append((i, tuple(values[p] for p in where)))
    return patterns


def _column_sums(rows: Sequence[Sequence[float]], neighbours: int) -> list[float]:
    """The complete candidates' log regrets summed per neighbour (zeros for none)."""
    return [sum(column) for column in zip(*rows)] if rows else [0.0] * neighbours


def _sums(members: Sequence[tuple[int, tuple[float, ...]]]) -> tuple[float, ...]:
    """The members' log regrets summed per neighbour, in the members' order."""
    return tuple(sum(column) for column in zip(*(values for _, values in members)))


def _undominated(members: Sequence[tuple[int, tuple[float, ...]]]) -> tuple[tuple[int, tuple[float, ...]], ...]:
    """The members whose smallest log regret is within ``_DOMINATED`` of the lowest largest one, in
    their order (empty for no members)."""
    if not members:
        return ()
    ceiling = min(max(values) for _, values in members) + _DOMINATED
    return tuple((i, values) for i, values in members if min(values) <= ceiling)


def best(plan_: tuple, weights: Sequence[float]) -> int | None:
    """The candidate with the smallest fitted log regret (ties: the lower index), or None if no
    allowed candidate was measured at a neighbour without a gap."""
    contenders, fit = plan_
    if contenders is not None:
        if len(contenders) == 1:
            return contenders[0][1]
        chosen = chosen_theta = None
        for lowest, i, values in contenders:  # by their smallest log regret, so the rest cannot win
            if chosen is not None and lowest > chosen_theta + _DOMINATED:
                break
            theta = sum(map(_mul, weights, values))  # the weights sum to 1
            if chosen is None or theta < chosen_theta or (theta == chosen_theta and i < chosen):
                chosen, chosen_theta = i, theta
        return chosen
    count, column_sums, complete, groups = fit
    shift, offsets = fit_offsets(weights, count, column_sums, groups)
    chosen = chosen_theta = None
    for i, values in complete:
        theta = sum(map(_mul, weights, values)) - shift
        if chosen is None or theta < chosen_theta or (theta == chosen_theta and i < chosen):
            chosen, chosen_theta = i, theta
    for (where, _, _, members), offset in zip(groups, offsets):
        if offset is None:  # no weight where this group was measured
            continue
        for i, values in members:
            theta = _partial_mean(weights, where, values) - offset
            if chosen is None or theta < chosen_theta or (theta == chosen_theta and i < chosen):
                chosen, chosen_theta = i, theta
    return chosen


def _partial_mean(weights: Sequence[float], where: Sequence[int], values: Sequence[float]) -> float:
    """A partial candidate's weighted mean log regret over the neighbours ``where`` it was measured."""
    total = covered = 0.0
    for p, value in zip(where, values):
        weight = weights[p]
        total += weight * value
        covered += weight
    return total / covered


def predicted_us(log_times: Sequence[float | None], weights: Sequence[float]) -> float:
    """A candidate's time interpolated in log space over the neighbours where it was measured, from
    its log times there (None where not measured; one at least measured)."""
    log_time = weight_sum = 0.0
    for value, weight in zip(log_times, weights):
        if value is not None:
            log_time += weight * value
            weight_sum += weight
    return math.exp(log_time / weight_sum)


def fit_offsets(weights: Sequence[float], count: int, column_sums: Sequence[float],
                groups: Sequence[tuple]) -> tuple[float, list[float | None]]:
    """local-regret's log r[p, c] ~ mu[p] + theta[c], fitted by alternating weighted least squares
    from theta = each candidate's weighted mean over its neighbours: FIT_PASSES updates of mu (the
    mean of r - theta over the candidates measured at p), then of theta. A candidate's fitted theta
    is its weighted mean less the weighted mean of mu over the neighbours where it was measured, so
    every candidate measured at the same neighbours moves by the same offset: the fit runs over those
    groups, not over candidates (the index build runs it per query).

    ``count`` complete candidates (measured at every neighbour) with their log regrets summed per
    neighbour in ``column_sums``; ``groups`` of partial candidates as :func:`plan` makes them. Returns
    (the complete candidates' offset, each group's offset, None where its neighbours have no weight)."""
    complete_sum = sum(map(_mul, weights, column_sums))  # the complete candidates' weighted means, summed
    base = [column_sum - complete_sum for column_sum in column_sums]  # sum of r - theta at p, before the fit
    measured = [count] * len(column_sums)
    live: list[tuple | None] = []
    for where, size, member_sums, _ in groups:
        group_weights = [weights[p] for p in where]
        covered = sum(group_weights)
        if not covered:
            live.append(None)
            continue
        group_mean = sum(map(_mul, group_weights, member_sums)) / covered  # its members' weighted means, summed
        for p, value in zip(where, member_sums):
            base[p] += value - group_mean
            measured[p] += size
        live.append((where, size, group_weights, covered))
    mu = [total / n if n else 0.0 for total, n in zip(base, measured)]  # the first pass: every offset 0
    for _ in range(FIT_PASSES - 1):
        shift, offsets = _offsets(weights, mu, live)
        totals = [value + count * shift for value in base]
        for group, offset in zip(live, offsets):
            if group is not None:
                added = group[1] * offset
                for p in group[0]:
                    totals[p] += added
        mu = [total / n if n else 0.0 for total, n in zip(totals, measured)]
    return _offsets(weights, mu, live)


def _offsets(weights: Sequence[float], mu: Sequence[float], live: Sequence[tuple | None]) -> tuple[float, list[float | None]]:
    """The weighted means of ``mu`` over every neighbour and over each live group's neighbours."""
    return sum(map(_mul, weights, mu)), [
        None if group is None else sum(map(_mul, group[2], [mu[p] for p in group[0]])) / group[3] for group in live]


def fit_effects(weights: Sequence[float], complete: Sequence[Sequence[float]],
                partial: Mapping[int, Sequence[float | None]], theta: dict[int, float],
                column_sums: Sequence[float] | None = None) -> None:
    """The fit of :func:`fit_offsets` over every candidate, as the rule states it: ``theta`` holds
    each candidate's weighted mean log regret (``complete``: the log regrets of the candidates
    measured at every neighbour; ``partial``: the others by index, None where not measured) and is
    updated in place to the fitted values. :func:`best` reaches the same floats through a plan."""
    if column_sums is None:
        column_sums = _column_sums(complete, len(weights))
    patterns = _by_neighbours(partial.items())
    groups = [(where, len(members), _sums(members), ()) for where, members in patterns.items()]
    shift, offsets = fit_offsets(weights, len(complete), column_sums, groups)
    offset_of = {i: offset for members, offset in zip(patterns.values(), offsets) for i, _ in members}
    for i in theta:
        theta[i] -= offset_of[i] if i in partial else shift
