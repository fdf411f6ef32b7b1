"""An uploaded exchange document read incrementally from a file: checked whole, then written, in
bounded memory whatever its size (``POST /runs``; runs in the upload process).

``autotuner.records.exchange.parse_document`` builds the whole document as pydantic objects: about
six times its JSON size in memory (a 250 MB upload took the server past 2 GB). Here the file is read
twice with ``service.json_scan`` (json's C scanner over a sliding window), one value at a time:

1. **check**: every value is validated with the schema's own models (``RunRecord`` for a run's fields,
   candidates and copy references, which are few; ``MeasurementRecord`` for the rows, ``BATCH_ROWS``
   at a time from their JSON text, so strictness is exactly ``parse_document``'s), plus the rules ``RunRecord`` applies
   across rows: a row's candidate index within the run's list, no row twice (rows are compared as
   packed integers in numpy arrays: 16 bytes a row). Errors are collected, located as pydantic's are
   (``("body", "runs", 0, "measurements", 5, "median_us")``), at most ``MAX_ERRORS``. A document that
   passes is then held to ``autotuner.records.plausibility`` (the rules ``import_runs`` applies): each
   run's GPU against the token's scope and the model, each batch of rows as it is read, where the run's
   ``gpu`` and ``timing_method`` came before its rows (``autotuner export`` writes them first);
   otherwise its rows are read once more for it. Problems raise ``RefusedUpload``: nothing is written.
2. **write** (only if the check found nothing), in the caller's transaction: each run opened as
   ``import_runs`` opens it (``provenance.open_run``), its rows inserted ``BATCH_ROWS`` at a time.

Key order inside a run does not matter (the first pass keeps the runs' fields, candidates and copy
references for the second). Memory: those, the duplicate check's arrays, and one batch of rows.
"""
from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

import numpy as np
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from autotuner.records.exchange import ExchangeDocument, ImportSummary, MeasurementRecord, RunRecord
from autotuner.records.plausibility import (
    LIMITS, RefusedUpload, Tally, count_problems, note_uses, scope_problems, validate_rows as plausibility_of_rows,
    validate_run,
)
from autotuner.records.provenance import open_run
from db import bulk
from service.json_scan import JsonError, JsonScanner

BATCH_ROWS = 5000
MAX_ERRORS = 100
ROW_ARRAYS = ("candidates", "measurements", "copy_references")
ROWS = TypeAdapter(list[MeasurementRecord])
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
    rows_checked: bool = True  # every row held to plausibility in pass 1 (its GPU and timing came first)
    record: RunRecord | None = None
    uses: dict[tuple[int, str], int] = field(default_factory=dict)  # plausibility.note_uses


def walk(handle: IO[bytes]) -> Iterator[tuple[str, int, Any]]:
    """``(kind, run index, value)`` for each piece of the document, in file order: ``("top", -1, (key,
    value))``, ``("run", i, None)`` at a run's start, ``("field", i, (key, value))``, ``(array name, i,
    item)`` for each candidate and copy reference, and ``("measurements", i, JSON text)`` for each row.
    Raises :class:`~service.json_scan.JsonError` where the text is not JSON or not shaped as a document."""
    scanner = JsonScanner(handle)
    if scanner.peek(("body",)) != "{":
        raise JsonError("Input should be an object (the exchange document)", ("body",))
    for key in scanner.members(("body",)):
        if key != "runs":
            yield "top", -1, (key, scanner.value(("body", key))[0])
            continue
        if scanner.peek(("body", "runs")) != "[":
            raise JsonError("Input should be a valid list", ("body", "runs"))
        for run in scanner.items(("body", "runs")):
            place = ("body", "runs", run)
            if scanner.peek(place) != "{":
                raise JsonError("Input should be an object", place)
            yield "run", run, None
            for name in scanner.members(place):
                if name not in ROW_ARRAYS:
                    yield "field", run, (name, scanner.value((*place, name))[0])
                    continue
                if scanner.peek((*place, name)) != "[":
                    raise JsonError("Input should be a valid list", (*place, name))
                for index in scanner.items((*place, name)):
                    if name == "measurements":
                        yield name, run, scanner.flat_text((*place, name, index))
                    else:
                        yield name, run, scanner.value((*place, name, index))[0]
    scanner.end(("body",))


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


def validate_rows(texts: list[str]) -> list[MeasurementRecord]:
    """One batch of rows from their JSON text (raises ValidationError located in the batch)."""
    return ROWS.validate_json("[" + ",".join(texts) + "]")


class _Check:
    """Pass 1: validation of everything, keeping what pass 2 needs."""

    def __init__(self, allowed_gpus: frozenset[str] | None) -> None:
        self.errors: list[dict[str, Any]] = []
        self.allowed_gpus = allowed_gpus
        self.problems = Tally()
        self.top: dict[str, Any] = {}
        self.runs: list[_Run] = []
        self._keys = (array("q"), array("q"))
        self._largest_candidate: tuple[int, int] = (-1, -1)  # (index, row)
        self._batch: list[str] = []
        self._rows_read = 0

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
                self._within("runs", index + 1, f"runs[{index}]")
                self.runs.append(_Run())
            elif kind == "field":
                self.runs[index].fields[value[0]] = value[1]
            elif kind == "measurements":
                self._within("rows", self._rows_read + 1, f"runs[{index}].measurements")
                self._rows_read += 1
                self._batch.append(value)
                if len(self._batch) >= BATCH_ROWS:
                    self._rows(index)
            else:
                listed = getattr(self.runs[index], kind)
                if kind == "candidates":
                    self._within("candidates", len(listed) + 1, f"runs[{index}].candidates")
                else:
                    self._within("rows", self._rows_read + 1, f"runs[{index}].copy_references")
                    self._rows_read += 1
                listed.append(value)
        if self.runs and len(self.errors) < MAX_ERRORS:
            self._finish(len(self.runs) - 1)
        try:  # the document's own fields; the runs were checked above
            ExchangeDocument.model_validate_json(json.dumps({**self.top, "runs": []}))
        except ValidationError as exc:
            self.add_error(_located(exc))
        if "runs" not in self.top and not self.runs and not any(e["loc"] == ("body", "runs") for e in self.errors):
            self.add_error([_error(("body", "runs"), "Field required", "missing")])

    @staticmethod
    def _within(what: str, count: int, where: str) -> None:
        """Refuse the document as soon as it passes a count limit: its size costs no more than that."""
        if count > LIMITS[what]:
            raise RefusedUpload(count_problems(what, count, where))

    def _rows(self, run: int) -> None:
        """The batch of rows just read, validated (one at a time only where the batch fails)."""
        texts, self._batch = self._batch, []
        first = self.runs[run].rows
        self.runs[run].rows += len(texts)
        try:
            rows: list[MeasurementRecord | None] = list(validate_rows(texts))
        except ValidationError:
            rows = []
            for offset, text in enumerate(texts):
                try:
                    rows.append(MeasurementRecord.model_validate_json(text))
                except ValidationError as exc:
                    self.add_error(_located(exc, "runs", run, "measurements", first + offset))
                    rows.append(None)
        self._plausibility(run, rows, first)
        note_uses(rows, self.runs[run].uses, first)
        for offset, row in enumerate(rows):
            if row is None or row.candidate >= 2**40:  # a larger index is refused below, and would not pack
                continue
            high, low = _row_key(row)
            self._keys[0].append(high)
            self._keys[1].append(low)
            if row.candidate > self._largest_candidate[0]:
                self._largest_candidate = (row.candidate, first + offset)

    def _plausibility(self, index: int, rows: list[MeasurementRecord | None], first: int) -> None:
        """A batch's rows held to plausibility, if the run's GPU model and timing are known by now;
        none where the document already breaks the schema (it is refused for that)."""
        run = self.runs[index]
        if self.errors or not run.rows_checked:  # the latter: all its rows are read once more
            return
        gpu, timing = run.fields.get("gpu"), run.fields.get("timing_method")
        if not (isinstance(gpu, dict) and isinstance(gpu.get("key"), str) and isinstance(timing, str)):
            run.rows_checked = False
            return
        self.problems.add(plausibility_of_rows(rows, gpu["key"], timing, f"runs[{index}].measurements", first))

    def _finish(self, index: int) -> None:
        """A run's fields, candidates and copy references as one RunRecord (its own cross-row checks),
        then its rows' candidate indexes and duplicates."""
        if self._batch:
            self._rows(index)
        run = self.runs[index]
        document = {**run.fields, "candidates": run.candidates, "measurements": [], "copy_references": run.copy_references}
        try:
            run.record = RunRecord.model_validate_json(json.dumps(document))
        except ValidationError as exc:
            self.add_error(_located(exc, "runs", index))
        else:
            self._run_plausibility(index, run.record)
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


    def _run_plausibility(self, index: int, record: RunRecord) -> None:
        """The run's GPU against the token's scope and its model, and its copy references."""
        where = f"runs[{index}]"
        self.problems.add(scope_problems(record.gpu.key, self.allowed_gpus, where))
        self.problems.add(validate_run(record, where, self.runs[index].uses))  # its rows are held apart


def _first_duplicate(high: array, low: array) -> int | None:
    if len(high) < 2:
        return None
    highs, lows = np.frombuffer(high, dtype=np.int64), np.frombuffer(low, dtype=np.int64)
    order = np.lexsort((lows, highs))
    same = (highs[order][1:] == highs[order][:-1]) & (lows[order][1:] == lows[order][:-1])
    if not same.any():
        return None
    return int(np.maximum(order[1:][same], order[:-1][same]).min())  # the first row that repeats one before it


def check_file(handle: IO[bytes], allowed_gpus: frozenset[str] | None = None) -> list[RunRecord]:
    """Pass 1: every run's record (without its measurements), or ``DocumentErrors``, or
    ``RefusedUpload`` (implausible, or a GPU model outside ``allowed_gpus``; None: any known model)."""
    check = _Check(allowed_gpus)
    try:
        check.run(handle)
    except JsonError as exc:
        check.add_error([_error(exc.place, exc.message, "json_invalid")])
    if check.errors:
        raise DocumentErrors(check.errors)
    runs = [run.record for run in check.runs]
    unchecked = {index for index, run in enumerate(check.runs) if not run.rows_checked}
    if unchecked:
        handle.seek(0)
        _late_plausibility(handle, runs, unchecked, check.problems)
    check.problems.check()
    return runs


def _late_plausibility(handle: IO[bytes], runs: list[RunRecord], unchecked: set[int], problems: Tally) -> None:
    """The rows of runs whose GPU or timing came after them, held to plausibility now (read-only)."""
    batch: list[str] = []
    first = run = 0

    def check() -> None:
        nonlocal first
        record = runs[run]
        problems.add(plausibility_of_rows(validate_rows(batch), record.gpu.key, record.timing_method,
                                          f"runs[{run}].measurements", first))
        first += len(batch)
        batch.clear()

    for kind, index, value in walk(handle):
        if kind == "run":
            if batch:
                check()
            run, first = index, 0
        elif kind == "measurements" and index in unchecked:
            batch.append(value)
            if len(batch) >= BATCH_ROWS:
                check()
    if batch:
        check()


def write_file(session: Session, handle: IO[bytes], runs: list[RunRecord], uploader: str | None = None) -> ImportSummary:
    """Pass 2, in the caller's transaction: the checked document's runs (stored with ``uploader``, re-sent
    ones under the rules of ``autotuner/records/provenance.py``) and their rows."""
    opened: list[tuple[int, list[int], Any]] = []  # (run id, candidate ids, stored rows or None) per run, in order
    created = measurements = copies = row_index = 0
    candidate_ids: set[int] = set()
    batch: list[str] = []

    def flush() -> None:
        nonlocal measurements, row_index
        run_id, ids, stored = opened[-1]
        rows = [{**row.__dict__, "run_id": run_id, "candidate_id": ids[row.candidate]} for row in validate_rows(batch)]
        if stored is not None:
            rows = stored.new_measurements(rows, row_index)
        row_index += len(batch)
        measurements += bulk.insert_measurements(session, rows)
        batch.clear()

    for kind, index, value in walk(handle):
        if kind == "run":
            if batch:
                flush()
            run, stored, ids = open_run(session, runs[index], uploader, f"runs[{index}]")
            opened.append((run.id, ids, stored))
            created, row_index = created + (stored is None), 0
            candidate_ids.update(ids)
            references = [{**copy.__dict__, "run_id": run.id} for copy in runs[index].copy_references]
            copies += bulk.insert_copy_references(
                session, references if stored is None else stored.new_copy_references(references))
        elif kind == "measurements":
            batch.append(value)
            if len(batch) >= BATCH_ROWS:
                flush()
    if batch:
        flush()
    session.flush()
    return ImportSummary(run_ids=[run_id for run_id, _, _ in opened], runs_created=created,
                         runs_reused=len(opened) - created, candidates=len(candidate_ids), measurements=measurements,
                         copy_references=copies, gpus=sorted({run.gpu.key for run in runs}))
