"""A fit never silently makes answers worse: a newly fitted table is compared with the one answering
today for its GPU, dtype and timing method (the database's current table, else the shipped one) before
it replaces it, and a run that contradicts earlier measurements of the same shapes is reported.

Comparison (:func:`compare`), on the two documents' ``points`` and ``candidates`` only:

- coverage: measured shapes, the largest M, the smallest and largest N. A table with fewer than
  ``COVERAGE_SHARE`` of today's measured shapes, or a narrower M or N range, is narrower.
- answers: on every shape either table measured, each table's answer (its decision index, what the lookup
  gives there, ``torch_softmax`` when none) is priced from one table's measured times at that shape,
  today's first, so that both answers are priced by the same measurement. Worse: the geometric mean of
  new / today above ``1 + GEOMEAN_TOLERANCE``, or a shape answered more than ``SHAPE_TOLERANCE`` times slower.

A worse or narrower table is refused (:class:`WorseTableError`) unless the caller says to replace it
anyway (``autotuner fit --replace-worse``).

Contradictions (:func:`contradictions`): among the runs of the fit's environment, a candidate's newest
time at a shape whose p20-p80 interval lies more than ``CONTRADICTION_FACTOR`` from an earlier run's
interval at the same shape (the spread of both measurements is allowed for; beyond it a kernel did not
get that much faster or slower by chance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from sqlalchemy.orm import Session

from autotuner.fit.fit import FitError
from autotuner.fit.rule import times_by_shape
from autotuner.lookup.select import FALLBACK_VARIANT, load_table_file, shipped_table_files
from autotuner.lookup.table import DispatchTable, TableFormatError
from db import queries

COVERAGE_SHARE = 0.9
GEOMEAN_TOLERANCE = 0.01
SHAPE_TOLERANCE = 1.5
CONTRADICTION_FACTOR = 1.5
REPLACE_FLAG = "--replace-worse"
SHOWN = 5


class WorseTableError(FitError):
    """The new table would answer worse than, or cover less than, the one answering today."""


@dataclass(frozen=True)
class Coverage:
    shapes: int
    m_max: int
    n_min: int
    n_max: int

    def __str__(self) -> str:
        return f"{self.shapes} measured shapes, M up to {self.m_max}, N {self.n_min}..{self.n_max}"


@dataclass(frozen=True)
class Incumbent:
    """The table answering today, and where it comes from in words."""

    document: Mapping[str, Any]
    origin: str


@dataclass
class Comparison:
    new: Coverage
    today: Coverage
    priced: int = 0  # shapes where both answers had a measured time in one table
    geomean: float | None = None  # new answer's time / today's, over the priced shapes
    slower: list[tuple[float, str]] = field(default_factory=list)  # (ratio, description), worst first
    reasons: list[str] = field(default_factory=list)  # why the new table is worse or narrower; empty: it is not


def coverage(document: Mapping[str, Any]) -> Coverage:
    points = document["points"]
    if not points:
        return Coverage(0, 0, 0, 0)
    return Coverage(len(points), max(p["m"] for p in points), min(p["n"] for p in points), max(p["n"] for p in points))


def _answer(table: DispatchTable, m: int, n: int) -> tuple[str, str]:
    chosen = table.answer(m, n)[0]  # the decision index, as the lookup answers
    if chosen is None:
        return (FALLBACK_VARIANT, "")
    candidate = table.candidates[chosen]
    return (candidate["variant"], candidate["config_key"])


def compare(new_document: Mapping[str, Any], today_document: Mapping[str, Any]) -> Comparison:
    """How the new table answers against today's (see the module docstring)."""
    result = Comparison(coverage(new_document), coverage(today_document))
    new, today = result.new, result.today
    if new.shapes < COVERAGE_SHARE * today.shapes:
        result.reasons.append(f"narrower: {new.shapes} measured shapes against {today.shapes} today")
    if new.m_max < today.m_max or new.n_min > today.n_min or new.n_max < today.n_max:
        result.reasons.append(f"narrower range: M up to {new.m_max}, N {new.n_min}..{new.n_max} against M up to "
                              f"{today.m_max}, N {today.n_min}..{today.n_max} today")
    new_table, today_table = DispatchTable(new_document), DispatchTable(today_document)
    today_times, new_times = times_by_shape(today_document), times_by_shape(new_document)
    logs = []
    for m, n in sorted(set(today_times) | set(new_times)):
        new_pick, today_pick = _answer(new_table, m, n), _answer(today_table, m, n)
        for times in (today_times.get((m, n)), new_times.get((m, n))):
            if times and new_pick in times and today_pick in times:
                ratio = times[new_pick] / times[today_pick]
                logs.append(math.log(ratio))
                if ratio > SHAPE_TOLERANCE:
                    result.slower.append((ratio, f"{m}x{n}: {today_pick[0]} {times[today_pick]:.4g} us -> "
                                                 f"{new_pick[0]} {times[new_pick]:.4g} us"))
                break
    result.priced = len(logs)
    result.slower.sort(reverse=True)
    if logs:
        result.geomean = math.exp(sum(logs) / len(logs))
        if result.geomean > 1 + GEOMEAN_TOLERANCE:
            result.reasons.append(f"answers slower on the shapes both measured: geomean x{result.geomean:.3f} "
                                  f"over {len(logs)} shapes")
    if result.slower:
        shown = "; ".join(text for _, text in result.slower[:SHOWN])
        result.reasons.append(f"{len(result.slower)} shape(s) answered more than {SHAPE_TOLERANCE}x slower: {shown}")
    return result


def incumbent(session: Session, gpu_key: str, dtype: str, timing_method: str) -> Incumbent | None:
    """The table answering (gpu, dtype, method) today: the database's current one, else the shipped one."""
    for row in queries.current_tables(session, gpu_key):
        if row.dtype == dtype and row.timing_method == timing_method:
            created = row.created_at.isoformat(timespec="seconds") if row.created_at else "?"
            return Incumbent(row.payload, f"the database's table {row.id} (fitted {created} from runs "
                                          f"{row.source_runs or []})")
    for path in shipped_table_files():
        if Path(path).stem == f"{gpu_key}_{dtype}_{timing_method}":
            try:
                return Incumbent(load_table_file(path).document, f"the shipped table {Path(path).name}")
            except TableFormatError:
                return None  # an unreadable shipped table answers nothing: the lookup warns about it
    return None


def check_replacement(document: Mapping[str, Any], today: Incumbent | None, *, replace_worse: bool = False) -> Comparison | None:
    """Raise :class:`WorseTableError` if ``document`` is worse or narrower than ``today``'s table (unless
    ``replace_worse``); the comparison, None when nothing answers today."""
    if today is None:
        return None
    result = compare(document, today.document)
    if result.reasons and not replace_worse:
        key = f"{document['gpu']}/{document['dtype']}/{document.get('timing_method', 'cold')}"
        raise WorseTableError(f"{key}: not stored, {today.origin} keeps answering: " + "; ".join(result.reasons)
                              + f". Measure more shapes (autotuner sweep), or pass {REPLACE_FLAG} to store it anyway")
    return result


@dataclass(frozen=True)
class Contradiction:
    variant: str
    config_key: str
    m: int
    n: int
    newest_us: float
    newest_run: int
    earlier_us: float
    earlier_run: int

    def __str__(self) -> str:
        return (f"{self.m}x{self.n} {self.variant}[{self.config_key}]: {self.newest_us:.4g} us in run {self.newest_run}"
                f" against {self.earlier_us:.4g} us in run {self.earlier_run}")


def _interval(row: Any) -> tuple[float, float]:
    return (row.p20_us or row.median_us, row.p80_us or row.median_us)


def contradictions(rows: Sequence[tuple[Any, Any, Any]]) -> list[Contradiction]:
    """Newest ok measurements that an earlier run's of the same candidate and shape contradict (see the
    module docstring). ``rows`` are (Measurement, Candidate, SweepRun), newest run first, one environment."""
    newest: dict[tuple[int, int, int, str], Any] = {}
    found: dict[tuple[int, int, int, str], Contradiction] = {}
    for measurement, candidate, run in rows:
        if measurement.status != "ok" or not measurement.median_us:
            continue
        key = (candidate.id, measurement.m, measurement.n, measurement.dtype)
        first = newest.setdefault(key, (measurement, candidate, run))
        if first[0] is measurement or key in found:
            continue
        (low_new, high_new), (low_old, high_old) = _interval(first[0]), _interval(measurement)
        if low_new > CONTRADICTION_FACTOR * high_old or low_old > CONTRADICTION_FACTOR * high_new:
            found[key] = Contradiction(candidate.variant, candidate.config_key, measurement.m, measurement.n,
                                       first[0].median_us, first[2].id, measurement.median_us, run.id)
    return list(found.values())


def fit_contradictions(session: Session, gpu_key: str, dtype: str, timing_method: str,
                       environment_id: int | None) -> list[Contradiction]:
    """:func:`contradictions` among the measurements a fit of (gpu, dtype, method) reads."""
    rows = queries.measurements_for(session, gpu_key, dtype, timing_method, environment_id=environment_id)
    return contradictions(rows)
