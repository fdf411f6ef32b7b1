"""Many measurement rows in few statements: what an upload of a whole sweep writes.

``record_measurement`` (``db/queries.py``) reads, then inserts or updates, one row per round trip,
which holds the write lock for about 0.5 ms a row. An upload writes thousands of rows at once, so
here each batch is one ``INSERT`` (executemany). Uploaded rows are only ever added: a stored run is
immutable (``autotuner/records/provenance.py`` compares a re-sent run with :func:`stored_rows` and
passes on only the rows it lacks), so a row already present is an error here, never overwritten.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from db.models import CopyReference, Measurement, utcnow
from db.queries import MEASUREMENT_FIELDS

COPY_REFERENCE_FIELDS = ("median_us", "p20_us", "p80_us", "repetitions", "gbps")
MEASUREMENT_KEY = ("run_id", "candidate_id", "m", "n", "dtype")
COPY_REFERENCE_KEY = ("run_id", "m", "n", "dtype")
BATCH_ROWS = 5000


def insert_measurements(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    """Insert measurement rows, each a mapping of the key columns, the ``MEASUREMENT_FIELDS`` (missing
    ones stored as NULL) and optionally ``created_at`` (default now). Returns the count."""
    return _insert(session, Measurement.__table__, MEASUREMENT_KEY, MEASUREMENT_FIELDS, rows)


def insert_copy_references(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    return _insert(session, CopyReference.__table__, COPY_REFERENCE_KEY, COPY_REFERENCE_FIELDS, rows)


def stored_rows(session: Session, run_id: int) -> tuple[dict[tuple, tuple], dict[tuple, tuple]]:
    """The run's measurements, (candidate_id, m, n, dtype) -> ``MEASUREMENT_FIELDS`` values, and its copy
    references, (m, n, dtype) -> ``COPY_REFERENCE_FIELDS`` values."""
    measurements = {tuple(row[:4]): tuple(row[4:]) for row in session.execute(
        select(*(Measurement.__table__.c[name] for name in (*MEASUREMENT_KEY[1:], *MEASUREMENT_FIELDS)))
        .where(Measurement.run_id == run_id))}
    copies = {tuple(row[:3]): tuple(row[3:]) for row in session.execute(
        select(*(CopyReference.__table__.c[name] for name in (*COPY_REFERENCE_KEY[1:], *COPY_REFERENCE_FIELDS)))
        .where(CopyReference.run_id == run_id))}
    return measurements, copies


def _insert(session: Session, table: Table, key: Sequence[str], fields: Sequence[str],
            rows: Iterable[Mapping[str, Any]]) -> int:
    """One driver-level ``executemany`` per batch: SQLAlchemy's per-row parameter processing costs
    more than SQLite's insert itself, so values go to the driver as tuples, converted only where the
    column's type has a bind processor (SQLite's DateTime)."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"bulk insert supports SQLite and PostgreSQL, not {dialect.name}")
    dated_table = "created_at" in table.c
    columns = [*key, *fields, *(["created_at"] if dated_table else [])]
    processors = [(i, p) for i, name in enumerate(columns)
                  if (p := table.c[name].type.dialect_impl(dialect).bind_processor(dialect))]
    now = utcnow()
    values_of: list[tuple[Any, ...]] = []
    for row in rows:
        values = [row[name] for name in key] + [row.get(name) for name in fields]
        if dated_table:
            values.append(row.get("created_at") or now)
        for index, process in processors:
            values[index] = process(values[index])
        values_of.append(tuple(values))
    marker = "?" if dialect.paramstyle == "qmark" else "%s"
    quote = dialect.identifier_preparer.quote
    sql = (f"INSERT INTO {quote(table.name)} ({', '.join(map(quote, columns))}) "
           f"VALUES ({', '.join([marker] * len(columns))})")
    for start in range(0, len(values_of), BATCH_ROWS):
        connection.exec_driver_sql(sql, values_of[start:start + BATCH_ROWS])
    return len(values_of)
