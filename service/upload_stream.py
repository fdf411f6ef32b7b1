"""An uploaded exchange document read incrementally from a file: checked whole, then written, in
bounded memory whatever its size (``POST /runs``; runs in the upload process).

``autotuner.records.exchange.parse_document`` builds the whole document as pydantic objects: about
six times its JSON size in memory (a 250 MB upload took the server past 2 GB). Here the file is read
twice with ``ijson`` (yajl's C parser), one value at a time:

1. **check**: every value is validated with the schema's own models (``RunRecord`` for a run's fields,
   candidates and copy references, which are few; ``MeasurementRecord`` one row at a time, from the
   row's JSON, so strictness is exactly ``parse_document``'s), plus the rules ``RunRecord`` applies
   across rows: a row's candidate index within the run's list, no row twice (rows are compared as
   packed integers in numpy arrays: 16 bytes a row). Errors are collected, located as pydantic's are
   (``("body", "runs", 0, "measurements", 5, "median_us")``), at most ``MAX_ERRORS``.
2. **write** (only if the check found nothing), in the caller's transaction: each run opened as
   ``import_runs`` opens it (``exchange.open_run``), its rows upserted ``BATCH_ROWS`` at a time.

Key order inside a run does not matter (the first pass keeps the runs' fields, candidates and copy
references for the second). Memory: those, the duplicate check's arrays, and one batch of rows.
"""
from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

import ijson
import numpy as np
from pydantic import ValidationError
from sqlalchemy.orm import Session

from autotuner.records.exchange import ExchangeDocument, ImportSummary, MeasurementRecord, RunRecord, open_run
from db import bulk

BATCH_ROWS = 5000
MAX_ERRORS = 100
ROW_ARRAYS = ("candidates", "measurements", "copy_references")
_DTYPE_CODES: dict[str, int] = {}


class DocumentErrors(ValueError):
    """The document breaks the schema: ``errors`` in pydantic's shape, located from ``body``."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(f"{len(errors)} problems")
        self.errors = errors


@dataclass
class _Run:
    """What the check keeps of one run for the write: everything but its measurements."""

    fields: dict[str, Any] = field(default_factory=dict)
    candidates: list[Any] = field(default_factory=list)
    copy_references: list[Any] = field(default_factory=list)
    rows: int = 0
    record: RunRecord | None = None


def _build(events: Iterator[tuple[str, str, Any]], event: str, value: Any) -> Any:
    """The whole JSON value that starts with (event, value)."""
    if event not in ("start_map", "start_array"):
        return value
    builder = ijson.ObjectBuilder()
    builder.event(event, value)
    depth = 1
    for _prefix, inner, inner_value in events:
        builder.event(inner, inner_value)
        if inner in ("start_map", "start_array"):
            depth += 1
        elif inner in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                return builder.value
    raise ValueError("the document ends inside a value")


def walk(handle: IO[bytes]) -> Iterator[tuple[str, int, Any]]:
    """``(kind, run index, value)`` for each piece of the document, in file order: ``("top", -1, (key,
    value))``, ``("run", i, None)`` at a run's start, ``("field", i, (key, value))``, and ``(array name,
    i, item)`` for each item of a run's candidates, measurements and copy references. A value of the
    wrong JSON type where a list or object must be raises ``DocumentErrors``."""
    events = iter(ijson.parse(handle, use_float=True))
    run = -1
    for prefix, event, value in events:
        if event == "map_key" or event in ("end_map", "end_array") and prefix in ("", "runs", "runs.item"):
            continue
        if prefix == "":
            if event != "start_map":
                raise DocumentErrors([_error(("body",), "Input should be an object (the exchange document)", "model_type")])
        elif prefix == "runs":
            if event != "start_array":
                raise DocumentErrors([_error(("body", "runs"), "Input should be a valid list", "list_type")])
        elif prefix == "runs.item":
            if event != "start_map":
                raise DocumentErrors([_error(("body", "runs", run + 1), "Input should be an object", "model_type")])
            run += 1
            yield "run", run, None
        elif prefix.startswith("runs.item."):
            key = prefix[len("runs.item."):]
            name = key[:-len(".item")] if key.endswith(".item") else None
            if key in ROW_ARRAYS:
                if event not in ("start_array", "end_array"):
                    raise DocumentErrors([_error(("body", "runs", run, key), "Input should be a valid list", "list_type")])
            elif name in ROW_ARRAYS:
                yield name, run, _build(events, event, value)
            else:
                yield "field", run, (key, _build(events, event, value))
        else:
            yield "top", -1, (prefix, _build(events, event, value))


def _error(loc: tuple, message: str, kind: str = "value_error") -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": message, "input": None}


def _located(exc: ValidationError, *place: Any) -> list[dict[str, Any]]:
    return [{**error, "loc": ("body", *place, *error["loc"]),
             "ctx": {key: str(value) for key, value in error.get("ctx", {}).items()}}
            for error in exc.errors(include_url=False)]


def _row_key(row: MeasurementRecord) -> tuple[int, int]:
    """A row's identity (candidate, m, n, dtype) packed exactly into two 64-bit integers."""
    code = _DTYPE_CODES.setdefault(row.dtype, len(_DTYPE_CODES))
    return row.candidate << 8 | code, row.m << 32 | row.n


class _Check:
    """Pass 1: validation of everything, keeping what pass 2 needs."""

    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []
        self.top: dict[str, Any] = {}
        self.runs: list[_Run] = []
        self._keys = (array("q"), array("q"))
        self._largest_candidate: tuple[int, int] = (-1, -1)  # (index, row)

    def add_error(self, errors: list[dict[str, Any]]) -> None:
        self.errors.extend(errors[:MAX_ERRORS - len(self.errors)])

    def run(self, handle: IO[bytes]) -> None:
        for kind, index, value in walk(handle):
            if len(self.errors) >= MAX_ERRORS:
                break
            if kind == "top":
                self.top[value[0]] = value[1]
            elif kind == "run":
                if self.runs:
                    self._finish(len(self.runs) - 1)
                self.runs.append(_Run())
            elif kind == "field":
                self.runs[index].fields[value[0]] = value[1]
            elif kind == "measurements":
                self._row(index, value)
            else:
                getattr(self.runs[index], kind).append(value)
        if self.runs and len(self.errors) < MAX_ERRORS:
            self._finish(len(self.runs) - 1)
        try:  # the document's own fields; the runs were checked above
            ExchangeDocument.model_validate_json(json.dumps({**self.top, "runs": []}))
        except ValidationError as exc:
            self.add_error(_located(exc))
        if "runs" not in self.top and not self.runs and not any(e["loc"] == ("body", "runs") for e in self.errors):
            self.add_error([_error(("body", "runs"), "Field required", "missing")])

    def _row(self, run: int, item: Any) -> None:
        place = self.runs[run].rows
        self.runs[run].rows += 1
        try:
            row = MeasurementRecord.model_validate_json(json.dumps(item))
        except ValidationError as exc:
            self.add_error(_located(exc, "runs", run, "measurements", place))
            return
        if row.candidate < 2**40:  # a larger index is refused below, and would not pack
            high, low = _row_key(row)
            self._keys[0].append(high)
            self._keys[1].append(low)
        if row.candidate > self._largest_candidate[0]:
            self._largest_candidate = (row.candidate, place)

    def _finish(self, index: int) -> None:
        """A run's fields, candidates and copy references as one RunRecord (its own cross-row checks),
        then its rows' candidate indexes and duplicates."""
        run = self.runs[index]
        document = {**run.fields, "candidates": run.candidates, "measurements": [], "copy_references": run.copy_references}
        try:
            run.record = RunRecord.model_validate_json(json.dumps(document))
        except ValidationError as exc:
            self.add_error(_located(exc, "runs", index))
        largest, place = self._largest_candidate
        if largest >= len(run.candidates):
            self.add_error([_error(("body", "runs", index, "measurements", place, "candidate"),
                                   f"candidate = {largest}, but the run lists {len(run.candidates)} candidates")])
        duplicate = _first_duplicate(*self._keys)
        if duplicate is not None:
            self.add_error([_error(("body", "runs", index, "measurements", duplicate),
                                   "repeats an earlier row's candidate, m, n and dtype")])
        self._keys = (array("q"), array("q"))
        self._largest_candidate = (-1, -1)
        run.candidates = []  # the record holds them now
        run.copy_references = []


def _first_duplicate(high: array, low: array) -> int | None:
    if len(high) < 2:
        return None
    highs, lows = np.frombuffer(high, dtype=np.int64), np.frombuffer(low, dtype=np.int64)
    order = np.lexsort((lows, highs))
    same = (highs[order][1:] == highs[order][:-1]) & (lows[order][1:] == lows[order][:-1])
    if not same.any():
        return None
    return int(np.maximum(order[1:][same], order[:-1][same]).min())  # the first row that repeats one before it


def check_file(handle: IO[bytes]) -> list[RunRecord]:
    """Pass 1: every run's record (without its measurements), or ``DocumentErrors``."""
    check = _Check()
    try:
        check.run(handle)
    except ijson.JSONError as exc:
        handle.seek(0)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "the document ends early"
        check.add_error([_error(("body", *_json_error_place(handle)), f"Invalid JSON: {reason} "
                                "(NaN and Infinity are not JSON numbers)", "json_invalid")])
    except DocumentErrors as exc:
        check.add_error(exc.errors)
    if check.errors:
        raise DocumentErrors(check.errors)
    return [run.record for run in check.runs]


def _json_error_place(handle: IO[bytes]) -> list[Any]:
    """Where the parser fails in the file: the keys and list indexes leading to the bad value (a
    second read, on this error path only, that tracks the position the first read does not)."""
    stack: list[list[Any]] = []  # [is a list, key or index] per open container
    try:
        for _prefix, event, value in ijson.parse(handle, use_float=True):
            if stack and stack[-1][0] and event != "end_array":
                stack[-1][1] += 1  # a new item of the list begins
            if event == "map_key":
                stack[-1][1] = value
            elif event in ("start_map", "start_array"):
                stack.append([event == "start_array", -1 if event == "start_array" else None])
            elif event in ("end_map", "end_array"):
                stack.pop()
    except ijson.JSONError:
        pass
    if stack and stack[-1][0]:
        stack[-1][1] += 1  # the item that failed to parse
    return [position for _is_list, position in stack if position is not None]


def write_file(session: Session, handle: IO[bytes], runs: list[RunRecord]) -> ImportSummary:
    """Pass 2, in the caller's transaction: the checked document's runs and rows."""
    opened: list[tuple[int, list[int]]] = []
    created = measurements = 0
    candidate_ids: set[int] = set()
    batch: list[dict[str, Any]] = []

    def flush() -> None:
        bulk.upsert_measurements(session, batch)
        batch.clear()

    for kind, index, value in walk(handle):
        if kind == "run":
            run, is_new, ids = open_run(session, runs[index])
            opened.append((run.id, ids))
            created += is_new
            candidate_ids.update(ids)
            bulk.upsert_copy_references(session, ({**copy.__dict__, "run_id": run.id} for copy in runs[index].copy_references))
        elif kind == "measurements":
            row = MeasurementRecord.model_validate_json(json.dumps(value))
            run_id, ids = opened[index]
            batch.append({**row.__dict__, "run_id": run_id, "candidate_id": ids[row.candidate]})
            measurements += 1
            if len(batch) >= BATCH_ROWS:
                flush()
    flush()
    session.flush()
    return ImportSummary(run_ids=[run_id for run_id, _ in opened], runs_created=created, runs_reused=len(opened) - created,
                         candidates=len(candidate_ids), measurements=measurements,
                         copy_references=sum(len(run.copy_references) for run in runs),
                         gpus=sorted({run.gpu.key for run in runs}))
