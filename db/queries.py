"""Query helpers. Each takes an open session; the caller opens, commits and closes it."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

from sqlalchemy import Row, and_, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.mirror import mirror_on_commit
from db.models import (
    CandidateRow,
    CopyReference,
    DispatchTableRow,
    Environment,
    GpuModel,
    Measurement,
    SweepRun,
    run_identity,
    utcnow,
)

MEASUREMENT_FIELDS = (
    "status", "median_us", "p20_us", "p80_us", "repetitions", "gbps", "registers", "spill_bytes",
    "static_smem", "dynamic_smem", "threads_per_block", "blocks_per_sm", "occupancy",
    "max_rel_error", "compile_seconds", "error",
)


def _get_or_create(session: Session, model: type, lookup: Mapping[str, Any], values: Mapping[str, Any]):
    """Row matching ``lookup``, created with ``values`` if absent; safe against a concurrent insert."""
    statement = select(model).filter_by(**lookup)
    row = session.scalars(statement).first()
    if row is not None:
        return row
    try:
        with session.begin_nested():
            row = model(**lookup, **values)
            session.add(row)
        return row
    except IntegrityError:
        return session.scalars(statement).one()


def get_or_create_gpu(session: Session, key: str, name: str, **details: Any) -> GpuModel:
    gpu = _get_or_create(session, GpuModel, {"key": key}, {"name": name, **details})
    for field, value in details.items():
        if value is not None and getattr(gpu, field) is None:
            setattr(gpu, field, value)
    return gpu


def get_or_create_environment(session: Session, fingerprint: str, **versions: Any) -> Environment:
    return _get_or_create(session, Environment, {"fingerprint": fingerprint}, versions)


def get_or_create_candidate(
    session: Session, variant: str, config_key: str, config: Mapping[str, Any], source_hash: str
) -> CandidateRow:
    return _get_or_create(
        session,
        CandidateRow,
        {"variant": variant, "config_key": config_key, "source_hash": source_hash},
        {"config": dict(config)},
    )


def gpu_by_key(session: Session, key: str) -> GpuModel | None:
    return session.scalars(select(GpuModel).where(GpuModel.key == key)).first()


def list_gpus(session: Session) -> list[GpuModel]:
    return list(session.scalars(select(GpuModel).order_by(GpuModel.key)))


def create_run(
    session: Session, gpu: GpuModel, environment: Environment, timing_method: str, **details: Any
) -> SweepRun:
    """A new run of this database's own host (a sweep, a confirmation): its start time is now unless
    given, moved on by a microsecond should another run of the same identity hold that instant."""
    started = details.pop("started_at", None) or utcnow()
    for _attempt in range(100):
        run = insert_run(session, gpu, environment, timing_method, started_at=started, **details)
        if run is not None:
            return run
        started += timedelta(microseconds=1)
    raise RuntimeError(f"no free start time for a new {gpu.key} run near {started.isoformat()}")


def insert_run(session: Session, gpu: GpuModel, environment: Environment, timing_method: str, *,
               started_at: datetime, host: str | None = None, **details: Any) -> SweepRun | None:
    """The new run with this identity (``db.models.run_identity``), or None where one is stored already
    (by this transaction or a committed one: the unique index decides, so two servers inserting the same
    run at once store it once)."""
    identity = run_identity(gpu.key, environment.fingerprint, timing_method, started_at, host)
    try:
        with session.begin_nested():
            run = SweepRun(gpu_model=gpu, environment=environment, timing_method=timing_method,
                           started_at=started_at, host=host, identity=identity, **details)
            session.add(run)
            session.flush()
    except IntegrityError:
        if run_by_identity(session, identity) is None:
            raise  # another constraint than the identity's
        return None
    return run


def run_by_identity(session: Session, identity: str) -> SweepRun | None:
    return session.scalars(select(SweepRun).where(SweepRun.identity == identity)).first()


def finish_run(session: Session, run_id: int, status: str) -> None:
    session.execute(
        update(SweepRun).where(SweepRun.id == run_id).values(status=status, finished_at=utcnow())
    )


def record_measurement(
    session: Session, run_id: int, candidate_id: int, m: int, n: int, dtype: str, **fields: Any
) -> Measurement:
    """Insert or overwrite the row for (run, candidate, shape): re-recording is idempotent."""
    unknown = set(fields) - set(MEASUREMENT_FIELDS)
    if unknown:
        raise TypeError(f"unknown measurement fields: {sorted(unknown)}")
    key = {"run_id": run_id, "candidate_id": candidate_id, "m": m, "n": n, "dtype": dtype}
    row = session.scalars(select(Measurement).filter_by(**key)).first()
    if row is None:
        row = Measurement(**key)
        session.add(row)
    for field in MEASUREMENT_FIELDS:
        setattr(row, field, fields.get(field))
    session.flush()
    return row


def record_copy_reference(session: Session, run_id: int, m: int, n: int, dtype: str, **fields: Any) -> CopyReference:
    key = {"run_id": run_id, "m": m, "n": n, "dtype": dtype}
    row = session.scalars(select(CopyReference).filter_by(**key)).first()
    if row is None:
        row = CopyReference(**key)
        session.add(row)
    for field in ("median_us", "p20_us", "p80_us", "repetitions", "gbps"):
        setattr(row, field, fields.get(field))
    session.flush()
    return row


def same_setting(gpu_id: int, environment_id: int, timing_method: str) -> tuple:
    """Conditions on SweepRun for rows comparable with a sweep: same GPU model, environment, method."""
    return (SweepRun.gpu_model_id == gpu_id, SweepRun.environment_id == environment_id,
            SweepRun.timing_method == timing_method)


def measured_rows(session: Session, gpu_id: int, environment_id: int, timing_method: str) -> list[tuple]:
    """(candidate_id, m, n, dtype, status, median_us, p20_us, p80_us) of every row measured for this
    GPU, environment and method, in any run: what a rerun skips (failed rows included: a rerun does
    not retry them), and what ``autotuner.tune.retime`` reads to choose rows to measure again."""
    statement = (
        select(Measurement.candidate_id, Measurement.m, Measurement.n, Measurement.dtype, Measurement.status,
               Measurement.median_us, Measurement.p20_us, Measurement.p80_us)
        .join(SweepRun, Measurement.run_id == SweepRun.id)
        .where(*same_setting(gpu_id, environment_id, timing_method))
    )
    return [tuple(row) for row in session.execute(statement)]


def copied_keys(session: Session, gpu_id: int, environment_id: int, timing_method: str) -> set[tuple[int, int, str]]:
    statement = (
        select(CopyReference.m, CopyReference.n, CopyReference.dtype)
        .join(SweepRun, CopyReference.run_id == SweepRun.id)
        .where(*same_setting(gpu_id, environment_id, timing_method))
    )
    return {tuple(row) for row in session.execute(statement)}


def measurements_for(
    session: Session,
    gpu_key: str,
    dtype: str | None = None,
    timing_method: str | None = None,
    environment_id: int | None = None,
    run_ids: Sequence[int] | None = None,
) -> list[tuple[Measurement, CandidateRow, SweepRun]]:
    """Measurements of one GPU model (any status), newest run first, with candidate and run."""
    conditions = [GpuModel.key == gpu_key]
    if dtype is not None:
        conditions.append(Measurement.dtype == dtype)
    if timing_method is not None:
        conditions.append(SweepRun.timing_method == timing_method)
    if environment_id is not None:
        conditions.append(SweepRun.environment_id == environment_id)
    if run_ids is not None:
        conditions.append(SweepRun.id.in_(list(run_ids)))
    statement = (
        select(Measurement, CandidateRow, SweepRun)
        .join(CandidateRow, Measurement.candidate_id == CandidateRow.id)
        .join(SweepRun, Measurement.run_id == SweepRun.id)
        .join(GpuModel, SweepRun.gpu_model_id == GpuModel.id)
        .where(and_(*conditions))
        .order_by(SweepRun.id.desc(), Measurement.id)
    )
    return [tuple(row) for row in session.execute(statement)]


def copy_references_for(
    session: Session, gpu_key: str, dtype: str | None = None, timing_method: str | None = None
) -> list[CopyReference]:
    statement = (
        select(CopyReference)
        .join(SweepRun, CopyReference.run_id == SweepRun.id)
        .join(GpuModel, SweepRun.gpu_model_id == GpuModel.id)
        .where(GpuModel.key == gpu_key)
        .order_by(SweepRun.id.desc())
    )
    if dtype is not None:
        statement = statement.where(CopyReference.dtype == dtype)
    if timing_method is not None:
        statement = statement.where(SweepRun.timing_method == timing_method)
    return list(session.scalars(statement))


def measured_shapes(session: Session, gpu_key: str, timing_method: str) -> list[tuple[int, int, str]]:
    """(m, n, dtype) of every shape measured on this GPU model with this method, in any run and
    environment (each holds a copy reference), smallest tensors first."""
    statement = (
        select(CopyReference.m, CopyReference.n, CopyReference.dtype).distinct()
        .join(SweepRun, CopyReference.run_id == SweepRun.id)
        .join(GpuModel, SweepRun.gpu_model_id == GpuModel.id)
        .where(GpuModel.key == gpu_key, SweepRun.timing_method == timing_method)
    )
    return sorted((tuple(row) for row in session.execute(statement)), key=lambda s: (s[0] * s[1], s[0], s[2]))


def save_table(
    session: Session,
    gpu: GpuModel,
    dtype: str,
    timing_method: str,
    payload: dict[str, Any],
    *,
    source_runs: Iterable[int],
    candidate_count: int,
    regret: Mapping[str, float | None] | None = None,
    environment_id: int | None = None,
) -> DispatchTableRow:
    """Store a fitted table as the current one for (gpu, dtype, method); older ones stay as history. Its
    file beside an SQLite database is written when the transaction commits (``db.mirror``)."""
    session.execute(
        update(DispatchTableRow)
        .where(
            DispatchTableRow.gpu_model_id == gpu.id,
            DispatchTableRow.dtype == dtype,
            DispatchTableRow.timing_method == timing_method,
        )
        .values(is_current=False)
    )
    regret = regret or {}
    table = DispatchTableRow(
        gpu_model=gpu,
        dtype=dtype,
        timing_method=timing_method,
        format_version=int(payload.get("format_version", 1)),
        source_runs=sorted(set(source_runs)),
        environment_id=environment_id,
        candidate_count=candidate_count,
        regret_geomean=regret.get("geomean"),
        regret_p95=regret.get("p95"),
        regret_max=regret.get("max"),
        is_current=True,
        payload=payload,
    )
    session.add(table)
    session.flush()
    mirror_on_commit(session, (gpu.key, dtype, timing_method), payload)
    return table


def current_tables(session: Session, gpu_key: str | None = None) -> list[DispatchTableRow]:
    statement = (
        select(DispatchTableRow)
        .join(GpuModel, DispatchTableRow.gpu_model_id == GpuModel.id)
        .where(DispatchTableRow.is_current.is_(True))
        .order_by(GpuModel.key, DispatchTableRow.dtype, DispatchTableRow.timing_method)
    )
    if gpu_key is not None:
        statement = statement.where(GpuModel.key == gpu_key)
    return list(session.scalars(statement))


def latest_table_time(session: Session) -> datetime | None:
    """When the newest table was stored: lets a server notice a refit without restarting."""
    return session.scalars(select(DispatchTableRow.created_at).order_by(DispatchTableRow.id.desc())).first()


# --- Helpers for the exchange format and the HTTP service (added; the functions above are unchanged) ---


def list_runs(session: Session, run_ids: Sequence[int] | None = None, gpu_key: str | None = None) -> list[SweepRun]:
    """Sweep runs in id order, optionally only those ids and/or those of one GPU model."""
    statement = select(SweepRun).join(GpuModel, SweepRun.gpu_model_id == GpuModel.id).order_by(SweepRun.id)
    if run_ids is not None:
        statement = statement.where(SweepRun.id.in_(list(run_ids)))
    if gpu_key is not None:
        statement = statement.where(GpuModel.key == gpu_key)
    return list(session.scalars(statement))


def measurements_of_run(session: Session, run_id: int) -> list[tuple[Measurement, CandidateRow]]:
    statement = (
        select(Measurement, CandidateRow)
        .join(CandidateRow, Measurement.candidate_id == CandidateRow.id)
        .where(Measurement.run_id == run_id)
        .order_by(Measurement.id)
    )
    return [tuple(row) for row in session.execute(statement)]


def copy_references_of_run(session: Session, run_id: int) -> list[CopyReference]:
    statement = select(CopyReference).where(CopyReference.run_id == run_id).order_by(CopyReference.id)
    return list(session.scalars(statement))


# Keyset paging scans at most this many ids past the cursor per request, so a filter that matches few
# rows costs a bounded range scan of the primary key rather than the whole table.
SCAN_WINDOW = 50_000


def search_measurements(
    session: Session,
    *,
    gpu_key: str | None = None,
    dtype: str | None = None,
    variant: str | None = None,
    status: str | None = None,
    m: int | None = None,
    n: int | None = None,
    timing_method: str | None = None,
    run_id: int | None = None,
    limit: int = 100,
    after: int = 0,
    scan_window: int = SCAN_WINDOW,
) -> tuple[list[Row], int | None]:
    """Up to ``limit`` measurement rows (every measurement column, plus the candidate's ``variant``,
    ``config_key``, ``config``, ``source_hash``, the run's ``timing_method`` and the GPU's ``gpu``) matching every given filter with ``after`` < id ≤ ``after`` +
    ``scan_window``, in id order, and the cursor of the next page (None when nothing is left).

    Keyset paging: no count and no OFFSET, so a request costs one primary-key range scan of at most
    ``scan_window`` ids whatever the page number. The next cursor is the last id returned when more
    rows match in the window, else the end of the window scanned (a page may then be short, even empty, with more
    to come), and None once the window reached the newest id."""
    filters = [(GpuModel.key, gpu_key), (Measurement.dtype, dtype), (CandidateRow.variant, variant),
               (Measurement.status, status), (Measurement.m, m), (Measurement.n, n),
               (SweepRun.timing_method, timing_method), (Measurement.run_id, run_id)]
    conditions = [column == value for column, value in filters if value is not None]
    window_end = after + scan_window
    page = (
        select(*Measurement.__table__.columns, CandidateRow.variant, CandidateRow.config_key, CandidateRow.config,
               CandidateRow.source_hash, SweepRun.timing_method, GpuModel.key.label("gpu"))
        .select_from(Measurement)
        .join(CandidateRow, Measurement.candidate_id == CandidateRow.id)
        .join(SweepRun, Measurement.run_id == SweepRun.id)
        .join(GpuModel, SweepRun.gpu_model_id == GpuModel.id)
        .where(Measurement.id > after, Measurement.id <= window_end, *conditions)
        .order_by(Measurement.id).limit(limit + 1)  # one more row says whether a next page exists
    )
    rows = list(session.execute(page))
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1].id
    newest = session.scalar(select(func.max(Measurement.id)))
    return rows, window_end if newest is not None and newest > window_end else None


def current_table_gpus(session: Session) -> set[str]:
    """The GPU models with a current table (their payloads not read)."""
    statement = (select(GpuModel.key).join(DispatchTableRow, DispatchTableRow.gpu_model_id == GpuModel.id)
                 .where(DispatchTableRow.is_current.is_(True)).distinct())
    return set(session.scalars(statement))


def current_tables_stamp(session: Session) -> tuple[int | None, int]:
    """(newest table id, number of current tables): changes whenever a table is saved or a current one
    removed, so a server compares it to decide whether to reload (cheaper than reading payloads)."""
    newest = session.scalar(select(func.max(DispatchTableRow.id)))
    current = session.scalar(select(func.count()).select_from(DispatchTableRow).where(DispatchTableRow.is_current.is_(True)))
    return newest, int(current or 0)


# --- Sweep resume, concurrent sweepers and `autotuner status` (added; the functions above are unchanged) ---


def shape_measurements(
    session: Session, gpu_id: int, environment_id: int, timing_method: str, m: int, n: int, dtype: str
) -> list[tuple[int, str, float | None]]:
    """(candidate_id, status, median_us) of every row on one shape for this GPU, environment and method,
    in any run: what a sweeper re-reads when it takes a shape, since another may have measured some."""
    statement = (
        select(Measurement.candidate_id, Measurement.status, Measurement.median_us)
        .join(SweepRun, Measurement.run_id == SweepRun.id)
        .where(*same_setting(gpu_id, environment_id, timing_method),
               Measurement.m == m, Measurement.n == n, Measurement.dtype == dtype)
    )
    return [tuple(row) for row in session.execute(statement)]


def has_copy_reference(
    session: Session, gpu_id: int, environment_id: int, timing_method: str, m: int, n: int, dtype: str
) -> bool:
    statement = (
        select(CopyReference.id)
        .join(SweepRun, CopyReference.run_id == SweepRun.id)
        .where(
            SweepRun.gpu_model_id == gpu_id,
            SweepRun.environment_id == environment_id,
            SweepRun.timing_method == timing_method,
            CopyReference.m == m, CopyReference.n == n, CopyReference.dtype == dtype,
        )
        .limit(1)
    )
    return session.scalar(statement) is not None


def mark_runs_interrupted(session: Session, run_ids: Sequence[int]) -> int:
    """Runs still marked "running" whose process is known to be gone become "interrupted"."""
    if not run_ids:
        return 0
    result = session.execute(
        update(SweepRun)
        .where(SweepRun.id.in_(list(run_ids)), SweepRun.status == "running")
        .values(status="interrupted", finished_at=utcnow())
    )
    return int(result.rowcount or 0)
