"""The JSON exchange document of sweep results: what ``autotuner export`` writes and what
``autotuner import`` and the service's ``POST /runs`` accept.

A GPU host that swept sends its runs to another database with it; nothing else travels this way.
The document carries every column of the rows it holds, except database ids, which the receiving
database assigns afresh::

    {"format_version": 1, "exported_at": "2025-...Z",
     "runs": [{"source_id": 3, "gpu": {"key": "h100", "name": "NVIDIA H100 80GB HBM3", ...},
               "environment": {"fingerprint": "...", "torch": "2.8.0", ...},
               "timing_method": "cold", "status": "finished", "started_at": "...", ...,
               "candidates": [{"variant": "cuda_block_online", "config_key": "block=256,vec=4",
                               "config": {"block": 256, "vec": 4}, "source_hash": "..."}],
               "measurements": [{"candidate": 0, "m": 4096, "n": 32000, "dtype": "bf16",
                                 "status": "ok", "median_us": 41.2, ...}],
               "copy_references": [{"m": 4096, "n": 32000, "dtype": "bf16", "median_us": 35.0, ...}]}]}

``measurements[i].candidate`` indexes the run's own ``candidates`` list. The schema below, then the
plausibility rules of ``plausibility.py`` (times against the GPU model's bandwidth, quantiles, the GPU's
name and properties), are checked in full before anything is written: a document that fails writes nothing. It is strict JSON:
integers are JSON integers, times are ISO 8601 strings, NaN and Infinity are refused everywhere. A run is stored once per identity (GPU, environment,
timing method, start time and host) with its uploader, and never rewritten: importing it again adds only
rows it lacks, and only for the uploader that sent it (``provenance.py``), so an upload can be retried
safely and nobody else's run can be changed.
"""
from __future__ import annotations

import json
import logging
import math
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Mapping, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy.orm import Session

from autotuner.domain import MAX_DIM, TIMING_METHODS
from autotuner.records.plausibility import check_document
from autotuner.records.provenance import open_run
from db import bulk, queries
from db.models import CopyReference, Measurement, SweepRun
from kernels.base import DTYPES  # canonical names only: the document is written by programs

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
RUN_STATUSES = ("running", "finished", "interrupted", "failed")
MEASUREMENT_STATUSES = ("ok", "wrong", "unsupported", "compile_error", "launch_error", "fault", "timeout")
COPY_FIELDS = ("median_us", "p20_us", "p80_us", "repetitions", "gbps")
# The deepest a value of the document may nest (the free-form ``grid`` is the only one that can nest at
# all; what a sweep writes there is two levels deep). ``POST /runs`` refuses a deeper value before it is
# decoded (``service/json_scan.py``): a decoder recurses once a level.
MAX_NESTING_DEPTH = 32

Dim = Annotated[int, Field(ge=0, le=MAX_DIM)]
RowLength = Annotated[int, Field(ge=1, le=MAX_DIM)]
Count = Annotated[int, Field(ge=0, le=2**62)]
Microseconds = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
ConfigValue = int | float | str | bool


class _Record(BaseModel):
    # Unknown fields are refused (a typo must not be dropped silently), no type is coerced ("5" is not
    # 5, 0 is not a time), and NaN/inf never reach the database. Validate with parse_document().
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def as_utc(value: datetime | None) -> datetime | None:
    """Naive times are UTC (SQLite returns them so); aware ones are converted to UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _utc_in_range(value: datetime) -> datetime:
    """A record's time in UTC (so the import stores it as it is). One that UTC cannot hold (year 1 at a positive offset, year 9999 at a
    negative one) is refused here, as a validation error, rather than overflowing in the import."""
    try:
        return as_utc(value)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} lies outside the years 1-9999 once converted to UTC") from None


Timestamp = Annotated[datetime, AfterValidator(_utc_in_range)]


class GpuRecord(_Record):
    key: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$", description="normalised model key, e.g. h100")
    name: str = Field(min_length=1, max_length=128)
    sm_count: Optional[Annotated[int, Field(ge=1, le=1_000_000)]] = None
    l2_bytes: Optional[Count] = None
    memory_bytes: Optional[Count] = None
    compute_capability: Optional[str] = Field(default=None, pattern=r"^\d{1,3}\.\d{1,3}$")


class EnvironmentRecord(_Record):
    fingerprint: str = Field(min_length=1, max_length=64)
    driver: Optional[str] = Field(default=None, max_length=32)
    cuda: Optional[str] = Field(default=None, max_length=32)
    torch: Optional[str] = Field(default=None, max_length=64)
    triton: Optional[str] = Field(default=None, max_length=32)
    cupy: Optional[str] = Field(default=None, max_length=32)
    python: Optional[str] = Field(default=None, max_length=32)
    created_at: Optional[Timestamp] = None


class CandidateRecord(_Record):
    variant: str = Field(min_length=1, max_length=64)
    config_key: str = Field(max_length=256)
    config: dict[str, ConfigValue]
    source_hash: str = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _key_matches_config(self) -> "CandidateRecord":
        # The key is derived from the config (kernels.base.KernelConfig.key); a mismatch means one of
        # them was edited, and the database would then hold two spellings of one candidate.
        expected = ",".join(f"{k}={v}" for k, v in self.config.items())
        if self.config_key != expected:
            raise ValueError(f"config_key {self.config_key!r} does not match config (expected {expected!r})")
        return self


class MeasurementRecord(_Record):
    candidate: int = Field(ge=0, description="index into the run's candidates")
    m: Dim
    n: RowLength
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    status: Literal[MEASUREMENT_STATUSES]  # type: ignore[valid-type]
    median_us: Optional[Microseconds] = None
    p20_us: Optional[Microseconds] = None
    p80_us: Optional[Microseconds] = None
    repetitions: Optional[Count] = None
    gbps: Optional[NonNegative] = None
    registers: Optional[Count] = None
    spill_bytes: Optional[Count] = None
    static_smem: Optional[Count] = None
    dynamic_smem: Optional[Count] = None
    threads_per_block: Optional[Count] = None
    blocks_per_sm: Optional[Count] = None
    occupancy: Optional[Annotated[float, Field(ge=0, le=1)]] = None
    max_rel_error: Optional[NonNegative] = None
    compile_seconds: Optional[NonNegative] = None
    error: Optional[str] = Field(default=None, max_length=65_536)
    created_at: Optional[Timestamp] = None


    @model_validator(mode="after")
    def _ok_rows_are_timed(self) -> "MeasurementRecord":
        if self.status == "ok" and self.median_us is None:
            raise ValueError("a measurement with status 'ok' needs median_us")
        return self


class CopyReferenceRecord(_Record):
    m: Dim
    n: RowLength
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    median_us: Microseconds
    p20_us: Optional[Microseconds] = None
    p80_us: Optional[Microseconds] = None
    repetitions: Optional[Count] = None
    gbps: Optional[NonNegative] = None



class RunRecord(_Record):
    source_id: Optional[int] = Field(default=None, description="the run's id in the exporting database")
    gpu: GpuRecord
    environment: EnvironmentRecord
    timing_method: Literal[TIMING_METHODS]  # type: ignore[valid-type]
    status: Literal[RUN_STATUSES] = "finished"  # type: ignore[valid-type]
    started_at: Timestamp
    finished_at: Optional[Timestamp] = None
    host: Optional[str] = Field(default=None, max_length=128)
    command: Optional[str] = Field(default=None, max_length=65_536)
    grid: Optional[dict[str, Any]] = None
    candidates: list[CandidateRecord] = Field(default_factory=list)
    measurements: list[MeasurementRecord] = Field(default_factory=list)
    copy_references: list[CopyReferenceRecord] = Field(default_factory=list)

    @field_validator("grid")
    @classmethod
    def _finite_grid(cls, value: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        _require_finite(value, "grid")
        return value

    @model_validator(mode="after")
    def _rows_are_consistent(self) -> "RunRecord":
        seen_candidates = set()
        for candidate in self.candidates:
            identity = (candidate.variant, candidate.config_key, candidate.source_hash)
            if identity in seen_candidates:
                raise ValueError(f"candidate {identity} is listed twice")
            seen_candidates.add(identity)
        seen_rows = set()
        for index, row in enumerate(self.measurements):
            if row.candidate >= len(self.candidates):
                raise ValueError(
                    f"measurements[{index}].candidate = {row.candidate}, but the run lists "
                    f"{len(self.candidates)} candidates"
                )
            identity = (row.candidate, row.m, row.n, row.dtype)
            if identity in seen_rows:
                raise ValueError(f"measurements[{index}] repeats candidate {row.candidate} at ({row.m}, {row.n}, {row.dtype})")
            seen_rows.add(identity)
        copies = [(c.m, c.n, c.dtype) for c in self.copy_references]
        if len(set(copies)) != len(copies):
            raise ValueError("copy_references lists one (m, n, dtype) twice")
        return self


class ExchangeDocument(_Record):
    format_version: Literal[FORMAT_VERSION] = Field(description=f"this program reads version {FORMAT_VERSION}")  # type: ignore[valid-type]
    exported_at: Optional[Timestamp] = None
    runs: list[RunRecord]


def _require_finite(value: Any, where: str, depth: int = 1) -> None:
    """Free-form JSON (``grid``) gets no per-field float check, so NaN/inf are looked for here, and its
    depth is held to ``MAX_NESTING_DEPTH``."""
    if isinstance(value, (dict, list)) and depth > MAX_NESTING_DEPTH:
        raise ValueError(f"{where} is nested deeper than {MAX_NESTING_DEPTH} levels (rule nesting-depth)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} holds {value}, which is not a JSON number")
    if isinstance(value, dict):
        for key, item in value.items():
            _require_finite(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _require_finite(item, f"{where}[{index}]", depth + 1)


def parse_document(data: bytes | str | Mapping[str, Any]) -> ExchangeDocument:
    """Validate an exchange document given as JSON text or as a mapping (as ``json.load`` returns it).

    Raises ``pydantic.ValidationError`` (a ``ValueError``) listing every problem with its location."""
    if isinstance(data, Mapping):
        try:
            data = json.dumps(data, allow_nan=False, default=_json_default)
        except ValueError as exc:  # NaN or Infinity somewhere in the mapping
            raise ValidationError.from_exception_data(
                "ExchangeDocument", [{"type": "value_error", "loc": (), "input": None, "ctx": {"error": exc}}]
            ) from None
    return ExchangeDocument.model_validate_json(data)


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class ImportSummary(BaseModel):
    """What an import wrote. ``run_ids`` are the receiving database's ids, in the document's order;
    ``measurements`` and ``copy_references`` count the rows added (a re-sent run's stored rows are not)."""

    run_ids: list[int]
    runs_created: int
    runs_reused: int
    candidates: int
    measurements: int
    copy_references: int
    gpus: list[str]


def export_runs(session: Session, run_ids: list[int] | None = None, gpu_key: str | None = None) -> dict[str, Any]:
    """The exchange document (a JSON-ready dict) of the given runs, or every run (of ``gpu_key``).

    It is validated against :class:`ExchangeDocument` before it is returned, so what this writes the
    import accepts; a database row that breaks the schema raises ``ValueError`` naming it."""
    runs = [_run_record(session, run) for run in queries.list_runs(session, run_ids=run_ids, gpu_key=gpu_key)]
    if run_ids is not None:
        missing = sorted(set(run_ids) - {run["source_id"] for run in runs})
        if missing:
            raise LookupError(f"no sweep runs with ids {missing}" + (f" for GPU {gpu_key!r}" if gpu_key else ""))
    document = {"format_version": FORMAT_VERSION, "exported_at": datetime.now(timezone.utc), "runs": runs}
    return parse_document(document).model_dump(mode="json")


def _run_record(session: Session, run: SweepRun) -> dict[str, Any]:
    gpu, environment = run.gpu_model, run.environment
    candidate_index: dict[int, int] = {}
    candidates: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    for row, candidate in queries.measurements_of_run(session, run.id):
        if candidate.id not in candidate_index:
            candidate_index[candidate.id] = len(candidates)
            candidates.append({"variant": candidate.variant, "config_key": candidate.config_key,
                               "config": dict(candidate.config), "source_hash": candidate.source_hash})
        measurements.append(_measurement_record(row, candidate_index[candidate.id]))
    return {
        "source_id": run.id,
        "gpu": {"key": gpu.key, "name": gpu.name, "sm_count": gpu.sm_count, "l2_bytes": gpu.l2_bytes,
                "memory_bytes": gpu.memory_bytes, "compute_capability": gpu.compute_capability},
        "environment": {"fingerprint": environment.fingerprint, "driver": environment.driver,
                        "cuda": environment.cuda, "torch": environment.torch, "triton": environment.triton,
                        "cupy": environment.cupy, "python": environment.python,
                        "created_at": as_utc(environment.created_at)},
        "timing_method": run.timing_method, "status": run.status,
        "started_at": as_utc(run.started_at), "finished_at": as_utc(run.finished_at),
        "host": run.host, "command": run.command, "grid": run.grid,
        "candidates": candidates,
        "measurements": measurements,
        "copy_references": [_copy_record(copy) for copy in queries.copy_references_of_run(session, run.id)],
    }


def _measurement_record(row: Measurement, candidate: int) -> dict[str, Any]:
    record = {"candidate": candidate, "m": row.m, "n": row.n, "dtype": row.dtype}
    record.update({field: getattr(row, field) for field in queries.MEASUREMENT_FIELDS})
    record["created_at"] = as_utc(row.created_at)
    return record


def _copy_record(copy: CopyReference) -> dict[str, Any]:
    record = {"m": copy.m, "n": copy.n, "dtype": copy.dtype}
    record.update({field: getattr(copy, field) for field in COPY_FIELDS})
    return record


def import_runs(session: Session, document: ExchangeDocument | bytes | str | Mapping[str, Any], *,
                allowed_gpus: frozenset[str] | None = None, uploader: str | None = None) -> ImportSummary:
    """Write a document's runs into the session's database; the caller commits (or rolls back).

    JSON text or a mapping is validated first (:func:`parse_document`), then every run's plausibility
    (``plausibility.check_document``: raises ``RefusedUpload``; ``allowed_gpus`` are the models the
    uploader may send), so a bad document writes nothing. GPU models, environments and candidates are
    shared with what the database already holds. Runs are stored with ``uploader`` (None: this database's
    own host); a run already stored is reused under the rules of ``provenance.py`` (another uploader's,
    or a changed row, raises ``StoredRunConflict``: the caller rolls back)."""
    if not isinstance(document, ExchangeDocument):
        document = parse_document(document)
    check_document(document, allowed_gpus)
    run_ids: list[int] = []
    created = reused = measurement_count = copy_count = 0
    candidate_ids: set[int] = set()
    gpus: set[str] = set()
    for index, record in enumerate(document.runs):
        run, stored, ids = open_run(session, record, uploader, f"runs[{index}]")
        created, reused = created + (stored is None), reused + (stored is not None)
        candidate_ids.update(ids)
        rows = [{**row.__dict__, "run_id": run.id, "candidate_id": ids[row.candidate]} for row in record.measurements]
        copies = [{**copy.__dict__, "run_id": run.id} for copy in record.copy_references]
        if stored is not None:
            rows, copies = stored.new_measurements(rows), stored.new_copy_references(copies)
        bulk.insert_measurements(session, rows)
        bulk.insert_copy_references(session, copies)
        measurement_count += len(rows)
        copy_count += len(copies)
        run_ids.append(run.id)
        gpus.add(record.gpu.key)
    session.flush()
    log.info("imported %d runs (%d new), %d measurements, %d copy references",
             len(run_ids), created, measurement_count, copy_count)
    return ImportSummary(run_ids=run_ids, runs_created=created, runs_reused=reused, candidates=len(candidate_ids),
                         measurements=measurement_count, copy_references=copy_count, gpus=sorted(gpus))
