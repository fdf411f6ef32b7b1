"""The decision index: the fit's rule evaluated once over the whole domain, for the lookup to read.

``index_document(document)`` returns the table document with its ``index`` (the format:
``autotuner/lookup/table.py``), built from the document's candidates and points by the rule of
``autotuner/fit/rule.py`` and the scaling model of ``autotuner/fit/model.py`` (``model.answer_fields``,
the one place the rule's answer is formed). How the cells are found, per view (a set of candidates a
GPU model runs) and N class (N % 8 == 0 and other N, which the rule keeps apart):

1. Lines where the rule's inputs change: each measured M (a band of its own, M = r alone) and N (a
   cell of its own), the reach thresholds around them (``CLAMP_REACH`` along N, ``COLUMN_REACH``
   along M, both sides), the candidates' constraint limits, the measured domain's edges, and every
   power of 2. Between them the rule's neighbours, admissible candidates and model rows are fixed,
   and its pick moves only with the interpolation weights.
2. In each M band [a, b), the rule is evaluated along N at M = a and at M = b - 1, at both ends of
   every cell between the lines (and its middle where it spans more than a quarter octave); where
   two samples differ the cell is bisected in log2 N down to ``RESOLUTION`` octaves (a change of pick
   is then placed at the middle of the last interval), so each profile is a run of answers.
3. The band's N cells are the union of both profiles' changes. A cell whose answer differs at the
   two M ends is bisected along M at its middle N to the same resolution: it holds a short list of
   M ranges. A cell's answer is the rule's at the cell's centre (``index_check`` checks it).
4. Each leaf's time model is the bilinear interpolation in (log2 M, log2 N) of its candidate's
   time (the scaling model's, else the rule's estimate) at the leaf's four corners: exact where the
   model is log-bilinear there (between measured lines); adjacent cells with the same answer merge
   while the merged model stays within ``MERGE_TOLERANCE`` of every corner it covers.

Measured points are stored as they are answered (exact, per view). A view is built for every set of
candidates a listed GPU model of the same or a newer compute capability runs (a donor's answers for
it, ``autotuner/lookup/select.py``); a GPU of a set not built answers from view 0 where its candidate
runs, else ``torch_softmax`` (the lookup says so).
"""
from __future__ import annotations

import bisect
import math
from array import array
from typing import Any, Mapping

from autotuner.domain import MAX_DIM
from autotuner.fit import model as scaling
from autotuner.fit.regret import CLAMP_REACH, COLUMN_REACH
from autotuner.fit.rule import RuleTable, _limits_of
from autotuner.lookup.gpu_models import GPU_MODELS, runnable_candidates
from autotuner.lookup.table import ARRAY_FIELDS, FORMAT_VERSION, LEAF_MODEL, encode_array

RESOLUTION = 1 / 32  # octaves: a change of pick is placed within this of where the rule has it
SPLIT_WIDTH = 1 / 16  # octaves: the widest N cell that holds M ranges
MERGE_TOLERANCE = 0.01
PIECE_JOINS = 8  # lines one time model may span inside a cell (the check of a piece is quadratic in them)  # relative: a merged cell's time model against its parts' corners
_NAN = float("nan")


def index_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` (format 1 or 2) in format 2 with its decision index (built afresh)."""
    rule = RuleTable({**document, "format_version": 1})
    builder = IndexBuilder(rule)
    return {**document, "format_version": FORMAT_VERSION, "index": builder.index()}


def views_of(rule: RuleTable) -> list[frozenset[int]]:
    """The candidate sets to answer among: all, then each set a listed GPU that may read this table
    (its own model, or one of the same or a newer compute capability) runs, if not all. A predicted
    table (``autotuner/fit/predict_table.py``) is read by its own GPU alone, which runs all of it."""
    everyone = frozenset(range(len(rule.candidates)))
    views = [everyone]
    if rule.document.get("source") == "predicted":
        return views
    own = GPU_MODELS.get(rule.gpu)
    for spec in GPU_MODELS.values():
        if own is not None and spec.compute_capability < own.compute_capability:
            continue
        runnable = runnable_candidates(rule.candidates, rule.gpu, spec)
        if runnable and runnable not in views:
            views.append(runnable)
    return views


class IndexBuilder:
    """The rule's answers over the domain, as :func:`index_document` describes."""

    def __init__(self, rule: RuleTable):
        self.rule = rule
        self.model = scaling._model_of(rule)
        self.measured = {(p["m"], p["n"]) for p in rule.points}
        self.answers: dict[tuple, int] = {}
        self.answer_list: list[tuple] = []
        self._times: dict[tuple[int, int, int], float | None] = {}  # one build's candidate times
        self.m_lines, self.n_lines = _lines(rule)

    def index(self) -> dict[str, Any]:
        views = views_of(self.rule)
        everyone = views[0]
        exact, partitions = [], []
        for usable in views:
            allowed = None if usable == everyone else usable
            exact.append([[m, n, self._answer_id(found), found[1], found[2]]
                          for m, n in sorted(self.measured) if (found := self._rule(m, n, allowed))])
            partitions.append([self._partition(allowed, cls) for cls in (0, 1)])
        return {"resolution": RESOLUTION, "copy_rate": self.model.copy_rate,
                "views": [{"excluded": sorted(everyone - usable)} for usable in views],
                "answers": [list(key) for key in self.answer_list], "exact": exact, "partitions": partitions}

    def _rule(self, m: int, n: int, allowed: frozenset[int] | None) -> tuple:
        candidate, predicted, exact, rule, reason = scaling.answer_fields(self.rule, m, n, allowed)
        return candidate, predicted, exact, rule, reason.replace(f"({m}, {n})", "({m}, {n})")

    def _answer_id(self, found: tuple) -> int:
        key = (found[0], found[3], found[4])
        number = self.answers.get(key)
        if number is None:
            number = self.answers[key] = len(self.answer_list)
            self.answer_list.append(key)
        return number

    def _key(self, m: int, n: int, allowed: frozenset[int] | None) -> int | None:
        """The rule's answer (by number) at a shape that is not measured; None at a measured one,
        which the exact probe answers (so its single-shape cell may take any answer)."""
        if (m, n) in self.measured:
            return None
        return self._answer_id(self._rule(m, n, allowed))

    def _partition(self, allowed: frozenset[int] | None, cls: int) -> dict[str, str]:
        out = {name: array(code) for name, code in ARRAY_FIELDS.items()}
        for a, b in zip(self.m_lines, self.m_lines[1:]):
            out["m_edges"].append(a)
            out["band_start"].append(len(out["n_edges"]))
            self._band(out, a, b, allowed, cls)
        out["band_start"].append(len(out["n_edges"]))
        out["split_start"].append(len(out["split_m"]))
        return {name: encode_array(values) for name, values in out.items()}

    def _band(self, out: dict[str, array], a: int, b: int, allowed: frozenset[int] | None, cls: int) -> None:
        """Band [a, b): its N cells, their M splits and leaves appended to ``out``."""
        low = self._profile(a, allowed, cls)
        high = self._profile(b - 1, allowed, cls) if b - 1 > a else low
        starts = sorted({n for n, _ in low} | {n for n, _ in high})
        cells = []  # (n_lo, n_hi exclusive, [(m_lo, m_hi exclusive, answer)])
        for n_lo, n_hi in zip(starts, [*starts[1:], MAX_DIM + 1]):
            cells.extend(self._cells(a, b, n_lo, n_hi, low, high, allowed, cls))
        if not cells:
            cells = [(1, MAX_DIM + 1, [(a, b, None)])]
        pieces = [piece for cell in self._merged(cells, a, b, cls, allowed) for piece in self._pieces(cell, a, b, cls, allowed)]
        for position, (n_lo, n_hi, ranges) in enumerate(pieces):
            out["n_edges"].append(n_lo if position else 1)  # N below the first cell's is of no class value
            if len(ranges) == 1:
                out["cell_ref"].append(self._leaf(out, ranges[0], n_lo, n_hi, cls))
            else:
                out["cell_ref"].append(-(len(out["split_start"]) + 1))
                out["split_start"].append(len(out["split_m"]))
                for index, entry in enumerate(ranges):
                    out["split_m"].append(entry[0] if index else a)
                    out["split_leaf"].append(self._leaf(out, entry, n_lo, n_hi, cls))

    def _cells(self, a: int, b: int, n_lo: int, n_hi: int, low: list, high: list, allowed, cls: int) -> list:  # noqa: ANN001
        """The cells of band [a, b) over [n_lo, n_hi), where the profiles at both M ends hold one answer
        each: one cell where the rule answers alike at both ends and the centre, else cells no wider
        than ``SPLIT_WIDTH`` octaves each split along M (a change of pick across the band is rarely
        at one M for every N)."""
        values = _class_values(n_lo, n_hi, cls)
        if values is None:
            return []
        mid = _class_mid(*values, cls)
        at_low, at_high = _at(low, mid), _at(high, mid)
        if at_low is None or at_high is None:  # a measured row: one M, and one of the answers is known
            return [(n_lo, n_hi, [(a, b, self._centre(a, b, n_lo, n_hi, cls, allowed, at_low if at_high is None else at_high))])]
        centre = self._key(_mid(a, b - 1), mid, allowed) if b - 1 > a + 1 else at_low
        if at_low == at_high == centre:
            return [(n_lo, n_hi, [(a, b, self._centre(a, b, n_lo, n_hi, cls, allowed, centre))])]
        first, last = values
        if last > first and math.log2(last / first) > SPLIT_WIDTH:
            split = _class_mid(first, last, cls)
            split = split if split > first else last
            return (self._cells(a, b, n_lo, split, low, high, allowed, cls)
                    + self._cells(a, b, split, n_hi, low, high, allowed, cls))
        ranges = self._along_m(a, b, mid, at_low, centre, at_high, allowed)
        return [(n_lo, n_hi, [(m_lo, m_hi, self._centre(m_lo, m_hi, n_lo, n_hi, cls, allowed, key))
                              for m_lo, m_hi, key in ranges])]

    def _profile(self, m: int, allowed: frozenset[int] | None, cls: int) -> list[tuple[int, int | None]]:
        """The rule's answers along N at this M: [(first N, answer)], changes placed to RESOLUTION."""
        runs: list[tuple[int, int | None]] = []

        def add(n: int, key: int | None) -> None:
            if key is not None and (not runs or runs[-1][1] != key):
                runs.append((n, key))
            elif key is None and not runs:
                runs.append((n, None))

        for n_lo, n_hi in zip(self.n_lines, self.n_lines[1:]):
            values = _class_values(n_lo, n_hi, cls)
            if values is None:
                continue
            first, last = values
            key_first = self._key(m, first, allowed)
            add(n_lo, key_first)
            if last == first:
                continue
            key_last = self._key(m, last, allowed)
            if math.log2(last / first) > 0.25:
                mid = _class_mid(first, last, cls)
                key_mid = self._key(m, mid, allowed)
                self._bisect_n(m, first, mid, key_first, key_mid, allowed, cls, add)
                self._bisect_n(m, mid, last, key_mid, key_last, allowed, cls, add)
            else:
                self._bisect_n(m, first, last, key_first, key_last, allowed, cls, add)
        if runs and runs[0][1] is None:  # a leading measured shape: the next answer covers it
            runs = [(runs[0][0], runs[1][1])] + runs[2:] if len(runs) > 1 else runs
        return runs

    def _bisect_n(self, m, lo, hi, key_lo, key_hi, allowed, cls, add) -> None:  # noqa: ANN001
        if key_lo == key_hi or key_hi is None:
            return
        step = 8 if cls == 0 else 1
        if hi - lo <= step or math.log2(hi / lo) <= RESOLUTION:
            add(hi if hi - lo <= step else _class_mid(lo, hi, cls), key_hi)
            return
        mid = _class_mid(lo, hi, cls)
        if mid in (lo, hi):
            add(hi, key_hi)
            return
        key_mid = self._key(m, mid, allowed)
        self._bisect_n(m, lo, mid, key_lo, key_mid, allowed, cls, add)
        self._bisect_n(m, mid, hi, key_mid, key_hi, allowed, cls, add)

    def _along_m(self, a: int, b: int, n: int, key_a: int, key_mid: int, key_b: int,
                 allowed: frozenset[int] | None) -> list[tuple[int, int, int]]:
        """[(m_lo, m_hi, answer)] over [a, b) at this N (answers at a, the middle, b - 1 given),
        changes placed to RESOLUTION."""
        changes: list[tuple[int, int]] = []

        def search(lo: int, hi: int, key_lo: int, key_hi: int) -> None:
            if key_lo == key_hi:
                return
            if hi - lo <= 1 or math.log2(hi / lo) <= RESOLUTION:
                changes.append((hi if hi - lo <= 1 else _mid(lo, hi), key_hi))
                return
            mid = min(max(_mid(lo, hi), lo + 1), hi - 1)
            key = self._key(mid, n, allowed)
            search(lo, mid, key_lo, key)
            search(mid, hi, key, key_hi)

        middle = _mid(a, b - 1)
        if a < middle < b - 1:
            search(a, middle, key_a, key_mid)
            search(middle, b - 1, key_mid, key_b)
        else:
            search(a, b - 1, key_a, key_b)
        edges = [a, *(m for m, _ in changes), b]
        keys = [key_a, *(key for _, key in changes)]
        return [(lo, hi, key) for lo, hi, key in zip(edges, edges[1:], keys) if hi > lo]

    def _centre(self, m_lo: int, m_hi: int, n_lo: int, n_hi: int, cls: int, allowed, fallback):  # noqa: ANN001
        """The rule's answer at the cell's centre (M and N geometric middles, N of the class)."""
        values = _class_values(n_lo, n_hi, cls)
        m = _mid(m_lo, m_hi - 1)
        key = self._key(m, _class_mid(*values, cls), allowed)
        return fallback if key is None else key

    def _merged(self, cells: list, a: int, b: int, cls: int, allowed) -> list:  # noqa: ANN001
        """Adjacent single-range cells with the same answer as one, while the rule answers the same at
        the merged centre and one time model reproduces the candidate's times (within
        ``MERGE_TOLERANCE``) at every N where the merged cells met."""
        merged: list = []
        joins: list[list[int]] = []  # per merged cell, the N where its parts met
        for cell in cells:
            if merged and len(cell[2]) == 1 and len(merged[-1][2]) == 1:
                previous = merged[-1]
                key, before = cell[2][0][2], previous[2][0][2]
                if key is None or before is None or key == before:
                    key = key if before is None else before
                    centre = self._centre(a, b, previous[0], cell[1], cls, allowed, key)
                    if centre == key and self._fits(key, a, b, previous[0], cell[1], [*joins[-1], cell[0]], cls):
                        merged[-1] = (previous[0], cell[1], [(a, b, key)])
                        joins[-1].append(cell[0])
                        continue
            merged.append(cell)
            joins.append([])
        return merged

    def _pieces(self, cell: tuple, a: int, b: int, cls: int, allowed) -> list:  # noqa: ANN001
        """A single-range cell cut at the lines of step 1 where one time model over it would miss the
        candidate's times by more than ``MERGE_TOLERANCE`` (the scaling model bends at measured N), or
        would span more than ``PIECE_JOINS`` lines; each piece's answer is the rule's at its centre."""
        n_lo, n_hi, ranges = cell
        if len(ranges) != 1 or ranges[0][2] is None or self._candidate_of(ranges[0][2]) is None:
            return [cell]
        key = ranges[0][2]
        inner = [line for line in self.n_lines[bisect.bisect_right(self.n_lines, n_lo):bisect.bisect_left(self.n_lines, n_hi)]
                 if _class_values(line, n_hi, cls) and _class_values(n_lo, line, cls)]
        if not inner:
            return [cell]
        cuts, start, joins = [], n_lo, []
        for position, line in enumerate(inner):
            end = inner[position + 1] if position + 1 < len(inner) else n_hi
            if not _class_values(start, line, cls) or (
                    len(joins) < PIECE_JOINS and self._fits(key, a, b, start, end, [*joins, line], cls)):
                joins.append(line)
            else:
                cuts.append(line)
                start, joins = line, []
        if not cuts:
            return [cell]
        edges = [n_lo, *cuts, n_hi]
        return [(lo, hi, [(a, b, self._centre(a, b, lo, hi, cls, allowed, key))]) for lo, hi in zip(edges, edges[1:])]

    def _fits(self, key: int | None, a: int, b: int, n_lo: int, n_hi: int, joins: list[int], cls: int) -> bool:
        """Whether one time model over [n_lo, n_hi) reproduces the candidate's times on both sides of
        every join (within ``MERGE_TOLERANCE``)."""
        candidate = None if key is None else self._candidate_of(key)
        if candidate is None:
            return True
        coefficients = self._time_model(candidate, a, b, n_lo, n_hi, cls)
        if coefficients[2] != coefficients[2]:
            return False
        for join in joins:
            above, below = _class_values(join, n_hi, cls), _class_values(n_lo, join, cls)
            for m in {a, b - 1}:
                for n in {above[0] if above else None, below[1] if below else None} - {None}:
                    actual = self._time(candidate, m, n)
                    if actual is None:
                        return False
                    got = 2.0 ** _evaluate(coefficients, math.log2(m) if m > 1 else 0.0, math.log2(n) if n > 1 else 0.0)
                    if abs(got / actual - 1) > MERGE_TOLERANCE:
                        return False
        return True

    def _candidate_of(self, key: int) -> int | None:
        return self.answer_list[key][0]

    def _leaf(self, out: dict[str, array], entry: tuple, n_lo: int, n_hi: int, cls: int) -> int:
        m_lo, m_hi, key = entry
        if key is None:  # only measured shapes inside: never read
            key = self._answer_id((None, None, False, "no-candidate", "measured"))
        out["leaf_answer"].append(key)
        candidate = self._candidate_of(key)
        model = self._time_model(candidate, m_lo, m_hi, n_lo, n_hi, cls) if candidate is not None else \
            (0.0, 0.0, _NAN, 0.0, 0.0, 0.0)
        out["leaf_model"].extend(model)
        return len(out["leaf_answer"]) - 1

    def _time_model(self, candidate: int, m_lo: int, m_hi: int, n_lo: int, n_hi: int, cls: int) -> tuple:
        """(x0, y0, c0, c1, c2, c3): the bilinear interpolation of log2 time at the cell's corners."""
        first, last = _class_values(n_lo, n_hi, cls)
        ms, ns = (m_lo, m_hi - 1), (first, last)
        xs = [math.log2(m) if m > 1 else 0.0 for m in ms]
        ys = [math.log2(n) if n > 1 else 0.0 for n in ns]
        corners = [[self._time(candidate, m, n) for n in ns] for m in ms]
        if any(t is None for row in corners for t in row):
            known = [t for row in corners for t in row if t is not None]
            centre = self._time(candidate, _mid(*ms), _class_mid(first, last, cls))
            level = centre if centre is not None else (math.exp(sum(map(math.log, known)) / len(known)) if known else None)
            return (xs[0], ys[0], _NAN if level is None else math.log2(level), 0.0, 0.0, 0.0)
        (f00, f01), (f10, f11) = [[math.log2(t) for t in row] for row in corners]
        dx, dy = xs[1] - xs[0], ys[1] - ys[0]
        c1 = (f10 - f00) / dx if dx else 0.0
        c2 = (f01 - f00) / dy if dy else 0.0
        c3 = (f11 - f10 - f01 + f00) / (dx * dy) if dx and dy else 0.0
        return (xs[0], ys[0], f00, c1, c2, c3)

    def _time(self, candidate: int, m: int, n: int) -> float | None:
        """The candidate's time at (m, n) as the rule's answer would give it (``model.answer_fields``),
        kept for the build: the merges and cuts ask for the same corners again."""
        key = (candidate, m, n)
        if key not in self._times:
            self._times[key] = self._time_uncached(candidate, m, n)
        return self._times[key]

    def _time_uncached(self, candidate: int, m: int, n: int) -> float | None:
        model = self.model
        time = model.time(candidate, m, n)
        if time or not model.inside(m, n):
            return time or None
        try:
            return max(self.rule.estimate(m, n, candidate), model.floor(m, n))
        except (ZeroDivisionError, KeyError, ValueError):  # not measured at any neighbour
            return None


def _evaluate(coefficients: tuple, x: float, y: float) -> float:
    x0, y0, c0, c1, c2, c3 = coefficients
    return c0 + c1 * (x - x0) + c2 * (y - y0) + c3 * (x - x0) * (y - y0)


def _lines(rule: RuleTable) -> tuple[list[int], list[int]]:
    """The M and N lower edges of step 1 (module docstring), each list ending at MAX_DIM + 1."""
    ms: set[int] = {1}
    ns: set[int] = {1}
    for value in {p["m"] for p in rule.points}:
        ms.update((value, value + 1, -(-value // COLUMN_REACH), value * COLUMN_REACH + 1,
                   -(-value // CLAMP_REACH), value * CLAMP_REACH + 1))
    for value in {p["n"] for p in rule.points}:
        ns.update((value, value + 1, -(-value // CLAMP_REACH), value * CLAMP_REACH + 1))
    for n_min, n_max, _, m_min, m_max in (_limits_of(c.get("constraints", {})) for c in rule.candidates):
        ns.update((n_min, n_max + 1))
        ms.update((m_min, m_max + 1))
    model = scaling._model_of(rule)
    ns.update((model.n_lo, model.n_hi + 1))
    ms.add(model.m_hi + 1)
    powers = {1 << k for k in range(32)}
    ms |= powers
    ns |= powers
    return ([v for v in sorted(ms) if 1 <= v <= MAX_DIM] + [MAX_DIM + 1],
            [v for v in sorted(ns) if 1 <= v <= MAX_DIM] + [MAX_DIM + 1])


def _class_values(lo: int, hi: int, cls: int) -> tuple[int, int] | None:
    """The smallest and largest N of class ``cls`` in [lo, hi), or None if there is none."""
    if cls == 0:
        first, last = -(-lo // 8) * 8, (hi - 1) // 8 * 8
    else:
        first = lo + 1 if lo % 8 == 0 else lo
        last = hi - 2 if (hi - 1) % 8 == 0 else hi - 1
    return (first, last) if first <= last and first >= 1 else None


def _mid(lo: int, hi: int) -> int:
    return min(max(round(math.sqrt(lo * hi)), lo), hi)


def _class_mid(lo: int, hi: int, cls: int) -> int:
    """An N of the class near the geometric middle of [lo, hi] (both of the class), within them."""
    mid = _mid(lo, hi)
    if cls == 0:
        mid -= mid % 8
    elif mid % 8 == 0:
        mid += 1 if mid < hi else -1
    return min(max(mid, lo), hi)


def _at(runs: list[tuple[int, int | None]], n: int) -> int | None:
    """The answer of a profile at N."""
    position = bisect.bisect_right(runs, (n, math.inf)) - 1
    return runs[position][1] if position >= 0 else None

