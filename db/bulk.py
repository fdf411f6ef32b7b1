"""Many measurement rows in few statements: what an upload of a whole sweep writes.

``record_measurement`` (``db/queries.py``) reads, then inserts or updates, one row per round trip,
which holds the write lock for about 0.5 ms a row. An upload writes thousands of rows at once, so
here each batch is one ``INSERT ... ON CONFLICT (run, candidate, shape) DO UPDATE`` (SQLite and
PostgreSQL both have it), with the same outcome: re-recording a row overwrites its fields.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from sqlalchemy import Table
from sqlalchemy.orm import Session

from db.models import CopyReference, Measurement, utcnow
from db.queries import MEASUREMENT_FIELDS

COPY_REFERENCE_FIELDS = ("median_us", "p20_us", "p80_us", "repetitions", "gbps")
MEASUREMENT_KEY = ("run_id", "candidate_id", "m", "n", "dtype")
COPY_REFERENCE_KEY = ("run_id", "m", "n", "dtype")
BATCH_ROWS = 5000


def upsert_measurements(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    """Insert or overwrite measurement rows, each a mapping of the key columns, the
    ``MEASUREMENT_FIELDS`` (missing ones stored as NULL) and optionally ``created_at`` (default now;
    on an overwrite the stored ``created_at`` changes only where a row gives one). Returns the count."""
    return _upsert(session, Measurement.__table__, MEASUREMENT_KEY, MEASUREMENT_FIELDS, rows)


def upsert_copy_references(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    return _upsert(session, CopyReference.__table__, COPY_REFERENCE_KEY, COPY_REFERENCE_FIELDS, rows)


def _upsert(session: Session, table: Table, key: Sequence[str], fields: Sequence[str],
            rows: Iterable[Mapping[str, Any]]) -> int:
    """One driver-level ``executemany`` per batch: SQLAlchemy's per-row parameter processing costs
    more than SQLite's insert itself, so values go to the driver as tuples, converted only where the
    column's type has a bind processor (SQLite's DateTime)."""
    connection = session.connection()
    dialect = connection.dialect
    if dialect.name not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"bulk upsert supports SQLite and PostgreSQL, not {dialect.name}")
    dated_table = "created_at" in table.c
    columns = [*key, *fields, *(["created_at"] if dated_table else [])]
    processors = [(i, p) for i, name in enumerate(columns)
                  if (p := table.c[name].type.dialect_impl(dialect).bind_processor(dialect))]
    now = utcnow()
    groups: dict[bool, list[list[Any]]] = {True: [], False: []}  # created_at given -> rows
    for row in rows:
        values = [row[name] for name in key] + [row.get(name) for name in fields]
        given = row.get("created_at") if dated_table else None
        if dated_table:
            values.append(given or now)
        for index, process in processors:
            values[index] = process(values[index])
        groups[given is not None].append(values)
    marker = "?" if dialect.paramstyle == "qmark" else "%s"
    quote = dialect.identifier_preparer.quote
    for date_given, group in groups.items():
        if not group:
            continue
        overwritten = [*fields, "created_at"] if date_given else list(fields)
        sql = (f"INSERT INTO {quote(table.name)} ({', '.join(map(quote, columns))}) "
               f"VALUES ({', '.join([marker] * len(columns))}) "
               f"ON CONFLICT ({', '.join(map(quote, key))}) DO UPDATE SET "
               + ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in overwritten))
        for start in range(0, len(group), BATCH_ROWS):
            connection.exec_driver_sql(sql, [tuple(values) for values in group[start:start + BATCH_ROWS]])
    return len(groups[True]) + len(groups[False])
