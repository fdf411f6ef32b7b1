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
BATCH_ROWS = 2000


def upsert_measurements(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    """Insert or overwrite measurement rows, each a mapping of the key columns, the
    ``MEASUREMENT_FIELDS`` (missing ones stored as NULL) and optionally ``created_at`` (default now;
    on an overwrite the stored ``created_at`` changes only where a row gives one). Returns the count."""
    return _upsert(session, Measurement.__table__, MEASUREMENT_KEY, MEASUREMENT_FIELDS, rows)


def upsert_copy_references(session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    return _upsert(session, CopyReference.__table__, COPY_REFERENCE_KEY, COPY_REFERENCE_FIELDS, rows)


def _upsert(session: Session, table: Table, key: Sequence[str], fields: Sequence[str],
            rows: Iterable[Mapping[str, Any]]) -> int:
    dated_table = "created_at" in table.c
    now = utcnow()
    groups: dict[bool, list[dict[str, Any]]] = {True: [], False: []}  # created_at given -> rows
    for row in rows:
        values = {name: row[name] for name in key}
        values.update({name: row.get(name) for name in fields})
        given = row.get("created_at") if dated_table else None
        if dated_table:
            values["created_at"] = given or now
        groups[given is not None].append(values)
    for date_given, group in groups.items():
        if not group:
            continue
        statement = _insert(session, table)
        overwritten = [*fields, "created_at"] if date_given else list(fields)
        statement = statement.on_conflict_do_update(
            index_elements=list(key), set_={name: statement.excluded[name] for name in overwritten})
        for start in range(0, len(group), BATCH_ROWS):
            session.execute(statement, group[start:start + BATCH_ROWS])
    return len(groups[True]) + len(groups[False])


def _insert(session: Session, table: Table):  # noqa: ANN202 - a dialect's Insert construct
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        raise NotImplementedError(f"bulk upsert supports SQLite and PostgreSQL, not {dialect}")
    return insert(table)
