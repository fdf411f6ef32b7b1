"""Where a stored run came from, and why it never changes: the rules an import applies per run.

A run is identified by its GPU model, environment, timing method, start time and host
(``db.models.run_identity``, unique in the database) and stored with its uploader: the name of the
upload token that sent it over HTTP, or None for this database's own host (a sweep, ``autotuner
import``, ``autotuner confirm``). Once stored, a run is immutable:

- ``run-identity``: a run whose identity is stored already, sent by another uploader, is refused (409).
  Its fields are public (any export holds them), so they prove nothing about who measured it.
- ``run-immutable``: the same uploader sending it again is idempotent: rows identical to the stored
  ones are skipped, rows the stored run lacks are added (a run exported while it was still running,
  sent again when it finished), and a row or run field that differs from the stored one is refused
  (409): nothing is rewritten. The one field that may move is the status, from ``running`` to how the
  run ended (with its end time).

Two servers receiving the same run at once store it once: the unique index lets one insert win and the
other then finds the stored run and applies the rules above (``db.queries.insert_run``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from sqlalchemy.orm import Session

from autotuner.records.plausibility import Problem, RefusedUpload
from db import bulk, queries
from db.models import SweepRun, run_identity

SHOWN = 3  # differing rows named in a refusal
LOCAL = "this database's own host"


class StoredRunConflict(RefusedUpload):
    """A run that would rewrite a stored one (see the module docstring): nothing of the document is stored."""

    @property
    def status(self) -> int:
        return 409


def describe_uploader(uploader: str | None) -> str:
    return f"uploader {uploader!r}" if uploader is not None else LOCAL


def open_run(session: Session, record: Any, uploader: str | None = None, where: str = "runs[0]") -> tuple[SweepRun, "RunRows | None", list[int]]:
    """The database run for ``record`` (an ``exchange.RunRecord``): created with ``uploader``, or the stored
    run of that identity when ``uploader`` sent it (see the module docstring; another uploader's raises
    :class:`StoredRunConflict`). Returns the run, the filter its rows go through (None for a new run: all
    of them are added) and the ids of its candidates in the record's order."""
    gpu = queries.get_or_create_gpu(session, record.gpu.key, record.gpu.name,
                                    **record.gpu.model_dump(exclude={"key", "name"}))
    versions = record.environment.model_dump(exclude={"fingerprint", "created_at"})
    if record.environment.created_at is not None:  # else the column's default (now) applies
        versions["created_at"] = record.environment.created_at
    environment = queries.get_or_create_environment(session, record.environment.fingerprint, **versions)
    run = queries.insert_run(session, gpu, environment, record.timing_method, started_at=record.started_at,
                             host=record.host, status=record.status, finished_at=record.finished_at,
                             command=record.command, grid=record.grid, uploader=uploader)
    rows = None
    if run is None:
        identity = run_identity(gpu.key, environment.fingerprint, record.timing_method, record.started_at, record.host)
        run = queries.run_by_identity(session, identity)
        assert run is not None  # insert_run returns None only where the identity is stored
        _check_resent(run, record, uploader, where)
        rows = RunRows(session, run, where)
    ids = [queries.get_or_create_candidate(session, c.variant, c.config_key, c.config, c.source_hash).id
           for c in record.candidates]
    session.flush()  # the run's id, for its rows
    return run, rows, ids


def _check_resent(run: SweepRun, record: Any, uploader: str | None, where: str) -> None:
    if run.uploader != uploader:
        raise StoredRunConflict([Problem("run-identity", where, (
            f"run {run.id} of this identity (GPU, environment, timing method, started_at, host) is stored already, "
            f"sent by another uploader than {describe_uploader(uploader)}; a stored run is never rewritten or "
            f"extended by another: send your own measurements as a run of your own (its own started_at)"))])
    changed = [name for name in ("command", "grid") if getattr(run, name) != getattr(record, name)]
    if run.status != record.status and not (run.status == "running" and record.status != "running"):
        changed.append("status")
    if changed:
        raise StoredRunConflict([Problem("run-immutable", where, (
            f"run {run.id} is stored with another {', '.join(changed)}; a stored run is never rewritten "
            f"(only its status may move on from 'running')"))])
    if run.status == "running" and record.status != "running":
        run.status, run.finished_at = record.status, record.finished_at


class RunRows:
    """The rows of a re-sent run that its stored copy lacks (see the module docstring); a row that differs
    from the stored one raises :class:`StoredRunConflict` naming it."""

    def __init__(self, session: Session, run: SweepRun, where: str):
        self.run_id = run.id
        self.where = where
        self.measurements, self.copies = bulk.stored_rows(session, run.id)

    def new_measurements(self, rows: Iterable[Mapping[str, Any]], first_index: int = 0) -> list[Mapping[str, Any]]:
        """``rows`` (the bulk insert's mappings, numbered from ``first_index`` in the run) not stored yet."""
        return self._new(rows, self.measurements, bulk.MEASUREMENT_KEY[1:], queries.MEASUREMENT_FIELDS,
                         f"{self.where}.measurements", first_index)

    def new_copy_references(self, rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return self._new(rows, self.copies, bulk.COPY_REFERENCE_KEY[1:], bulk.COPY_REFERENCE_FIELDS,
                         f"{self.where}.copy_references", 0)

    def _new(self, rows: Iterable[Mapping[str, Any]], stored: dict[tuple, tuple], key: Sequence[str],
             fields: Sequence[str], where: str, first_index: int) -> list[Mapping[str, Any]]:
        fresh, differing = [], []
        for index, row in enumerate(rows, first_index):
            values = stored.get(tuple(row[name] for name in key))
            if values is None:
                fresh.append(row)
            elif values != tuple(row.get(name) for name in fields):
                shape = f"{row['m']}x{row['n']} {row['dtype']}"
                differing.append(Problem("run-immutable", f"{where}[{index}]",
                                         f"{shape}: differs from the row stored in run {self.run_id}"))
        if differing:
            raise StoredRunConflict(differing[:SHOWN * 10], {"run-immutable": len(differing)})
        return fresh
