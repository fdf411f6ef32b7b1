"""A fit never silently makes answers worse: a newly fitted table is compared with the one answering
today for its GPU, dtype and timing method (the database's current table, else the shipped one) before
it replaces it.

Comparison (:func:`compare`), on the two documents' ``points`` and ``candidates`` and the fit's evidence:

- coverage: measured shapes, the largest M, the smallest and largest N. A table with fewer than
  ``COVERAGE_SHARE`` of today's measured shapes, or a narrower M or N range, is narrower.
- answers: on every shape either table measured (M and N at least 1), each table's answer (its decision
  index, what the lookup gives there, ``torch_softmax`` when none). An answer that stays is priced 1
  where a table measured it. A changed answer is priced by evidence independent of the rows that
  proposed it (``autotuner/fit/evidence.py``, ``Evidence.price_change``: each source's own reading of
  both answers at the shape, no single source setting the price); without the fit's evidence, from one
  table's measured times, today's first. Worse: the geometric mean of new / today above
  ``1 + GEOMEAN_TOLERANCE``, or a shape answered more than ``SHAPE_TOLERANCE`` times slower.
- evidence: an answer may move only where two sources measured both answers at the shape, or a
  confirmation did (``autotuner confirm``), and they do not find the new answer slower beyond the
  measured repeatability; an answer that one source alone would move, or that the sources find slower
  (disputed), is unconfirmed.

Where the GPU model has no table of its own for the dtype and method, what answers today is what the
lookup gives it: another model's table, among the kernels this model runs, or ``torch_softmax``
(``lookup/select.py``). Its first table is held to the evidence rule against those answers (coverage
and the other model's times do not apply), so that one uploader alone cannot give a model its answers.

A worse, narrower or unconfirmed table is refused (:class:`WorseTableError`) unless the caller says to
replace it anyway (``autotuner fit --replace-worse``).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sqlalchemy.orm import Session

from autotuner.fit.fit import FitError
from autotuner.fit.rule import times_by_shape
from autotuner.lookup.select import FALLBACK_VARIANT, load_table_file, shipped_table_files
from autotuner.lookup.table import DispatchTable, TableFormatError
from autotuner.records.store import answering_store, database_tables
from db import queries

COVERAGE_SHARE = 0.9
GEOMEAN_TOLERANCE = 0.01
SHAPE_TOLERANCE = 1.5
REPLACE_FLAG = "--replace-worse"
SHOWN = 5


class WorseTableError(FitError):
    """The new table would answer worse than, cover less than, or move answers on less evidence than
    the one answering today; ``comparison`` says how."""

    def __init__(self, message: str, comparison: "Comparison | None" = None):
        super().__init__(message)
        self.comparison = comparison


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
    """The table answering today, and where it comes from in words. ``answers`` is set where the GPU
    model has no table of its own: (variant, config_key) the lookup gives it at (m, n) today, from
    ``document``, another model's table (or from none: ``torch_softmax``)."""

    document: Mapping[str, Any]
    origin: str
    answers: Callable[[int, int], tuple[str, str]] | None = None


@dataclass(frozen=True)
class Change:
    """An answer the new table moves at a measured shape, with its price by the fit's evidence."""

    m: int
    n: int
    today: tuple[str, str]
    new: tuple[str, str]
    price: Any  # evidence.Price, or None without the fit's evidence

    def __str__(self) -> str:
        ratio = f" x{self.price.ratio:.3g}" if self.price is not None and self.price.ratio is not None else ""
        return f"{self.m}x{self.n}: {_name(self.today)} -> {_name(self.new)}{ratio}"


@dataclass
class Comparison:
    new: Coverage
    today: Coverage
    priced: int = 0  # shapes where both answers had a price
    geomean: float | None = None  # new answer's time / today's, over the priced shapes
    slower: list[tuple[float, str]] = field(default_factory=list)  # (ratio, description), worst first
    changes: list[Change] = field(default_factory=list)  # answers moved at measured shapes
    unconfirmed: list[Change] = field(default_factory=list)  # of those, the ones no two sources (nor a confirmation) priced
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


def compare(new_document: Mapping[str, Any], today_document: Mapping[str, Any], evidence: Any = None, *,
            today_answers: Callable[[int, int], tuple[str, str]] | None = None) -> Comparison:
    """How the new table answers against today's (see the module docstring); ``evidence`` is the fit's
    ``evidence.Evidence`` (None: changed answers are priced from the tables' own times); ``today_answers``
    (``Incumbent.answers``): today's answers where they come from another model's table, whose coverage
    and times are then not compared."""
    borrowed = today_answers is not None
    result = Comparison(coverage(new_document), coverage(today_document))
    new, today = result.new, result.today
    if not borrowed and new.shapes < COVERAGE_SHARE * today.shapes:
        result.reasons.append(f"narrower: {new.shapes} measured shapes against {today.shapes} today")
    if not borrowed and (new.m_max < today.m_max or new.n_min > today.n_min or new.n_max < today.n_max):
        result.reasons.append(f"narrower range: M up to {new.m_max}, N {new.n_min}..{new.n_max} against M up to "
                              f"{today.m_max}, N {today.n_min}..{today.n_max} today")
    new_table = DispatchTable(new_document)
    if today_answers is None:
        today_table = DispatchTable(today_document)
        today_answers = lambda m, n: _answer(today_table, m, n)  # noqa: E731
    today_times = {} if borrowed else times_by_shape(today_document)  # another model's times price nothing here
    new_times = times_by_shape(new_document)
    logs = []
    for m, n in sorted(shape for shape in set(today_times) | set(new_times) if min(shape) >= 1):  # no rows, no answer
        new_pick, today_pick = _answer(new_table, m, n), today_answers(m, n)
        if new_pick != today_pick and evidence is not None:
            change = Change(m, n, today_pick, new_pick, evidence.price_change(m, n, today_pick, new_pick))
            result.changes.append(change)
            if not change.price.evidenced:
                result.unconfirmed.append(change)
                continue
            ratios = [change.price.ratio]
        else:
            ratios = [times[new_pick] / times[today_pick] for times in (today_times.get((m, n)), new_times.get((m, n)))
                      if times and new_pick in times and today_pick in times][:1]
            if new_pick != today_pick and evidence is None and ratios:
                result.changes.append(Change(m, n, today_pick, new_pick, None))
        for ratio in ratios:
            logs.append(math.log(ratio))
            if ratio > SHAPE_TOLERANCE:
                result.slower.append((ratio, f"{m}x{n}: {today_pick[0]} -> {new_pick[0]} x{ratio:.3g}"))
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
    if result.unconfirmed:
        result.reasons.append(unconfirmed_reason(result.unconfirmed, evidence))
    return result


def unconfirmed_reason(changes: Sequence[Change], evidence: Any) -> str:
    """Why unconfirmed answer changes keep a table out, naming them and whose evidence they rest on: one
    source alone timed both answers, nobody did, or the sources that did find the new one slower."""
    groups: dict[str, list[str]] = {}
    for change in changes:
        price = change.price
        if price.disputed:
            what = "would move to a pick the sources that timed both find slower beyond the measured repeatability"
            why = f"priced by {evidence.describe_sources(price.sources)}, no single one of them setting it"
        elif price.sources:
            what, why = "would move on one source's evidence", f"by {evidence.describe_sources(price.sources)} alone"
        else:
            what = "would move to a pick nobody timed beside today's answer"
            why = f"proposed by {evidence.describe_sources(price.proposed_by) or 'no current row'}"
        groups.setdefault(what, []).append(f"{change} ({why})")
    reasons = [f"{len(found)} answer(s) {what}: " + "; ".join(found[:SHOWN])
               + (f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else "") for what, found in groups.items()]
    return ("; ".join(reasons) + "; an answer moves on a second source's run (another uploader or host) or a "
            "confirming re-measurement (autotuner confirm) that finds it no slower")


def _name(candidate: tuple[str, str]) -> str:
    return f"{candidate[0]}[{candidate[1]}]" if candidate[1] else candidate[0]


def incumbent(session: Session, gpu_key: str, dtype: str, timing_method: str) -> Incumbent:
    """What answers (gpu, dtype, method) today: the database's current table, else the shipped one, else
    (the model has none of its own) what the lookup gives it from another model's table, or from none."""
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
                break  # an unreadable shipped table answers nothing (the lookup warns): as if there were none
    return _borrowed(session, gpu_key, dtype, timing_method)


def _borrowed(session: Session, gpu_key: str, dtype: str, timing_method: str) -> Incumbent:
    """Today's answers of a model without a table of its own, as the lookup gives them (its warning that
    another model's table answers is the point here, not news)."""
    store = answering_store(database_tables(session))

    def answers(m: int, n: int) -> tuple[str, str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            choice = store.select_canonical(m, n, dtype, gpu_key, timing_method)
        return (choice.variant, choice.config_key)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reason = store.select_canonical(1, 1024, dtype, gpu_key, timing_method).reason
    return Incumbent({"points": [], "candidates": []}, f"what the lookup answers today ({reason})", answers)


def check_replacement(document: Mapping[str, Any], today: Incumbent, *, replace_worse: bool = False,
                      evidence: Any = None) -> Comparison:
    """Raise :class:`WorseTableError` if ``document`` is worse, narrower or unconfirmed against what
    answers today (unless ``replace_worse``; ``evidence``: the fit's); the comparison."""
    result = compare(document, today.document, evidence, today_answers=today.answers)
    if result.reasons and not replace_worse:
        key = f"{document['gpu']}/{document['dtype']}/{document.get('timing_method', 'cold')}"
        raise WorseTableError(f"{key}: not stored, {today.origin} keeps answering: " + "; ".join(result.reasons)
                              + f". Measure more shapes (autotuner sweep), confirm the changed answers (autotuner "
                              f"confirm), or pass {REPLACE_FLAG} to store it anyway", result)
    return result
