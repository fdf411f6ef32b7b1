"""Is the database whole and writable? A quick check for start-up and ``/healthz?deep=1``, and the
reading of a driver error as damage, a read-only database or a full disk.

``check_integrity`` opens its own DB-API connection (never a pooled one: a pooled SQLite connection
may answer from its page cache and miss pages damaged on disk since), then

- SQLite: ``PRAGMA quick_check`` (every page and b-tree is read; about a second per GB), then a write
  probe: ``BEGIN IMMEDIATE`` and an update that changes nothing, rolled back;
- PostgreSQL (any other backend): the same update in a transaction that is rolled back.

It returns None when all is well, else a :class:`StorageProblem` whose reason a person can act on.

``header_problem`` is the cheap look plain ``/healthz`` takes every time (an SQLite file's first 100
bytes and its size, no query): a header that is not SQLite's, or a file shorter than the pages its
header counts (truncated). What it finds is confirmed by ``check_integrity`` before it is reported.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from sqlalchemy import Engine

# An update that writes nothing new, but needs a write transaction: it fails on a read-only database.
WRITE_PROBE = "UPDATE schema_info SET value = value WHERE key = 'application'"
QUICK_CHECK_ERRORS = 5  # quick_check(N) stops after N problems: enough to name the damage

# SQLite's and PostgreSQL's wording of each condition (error codes do not survive every wrapper).
_DAMAGED = re.compile(r"malformed|not a database|not an SQLite database|corrupt|disk I/O error|integrity check", re.I)
SQLITE_MAGIC = b"SQLite format 3\x00"
_READ_ONLY = re.compile(r"read-?only|readonly", re.I)
_FULL = re.compile(r"disk is full|database or disk is full|no space left|disk full|quota", re.I)


@dataclass(frozen=True)
class StorageProblem:
    """What is wrong with the database: ``kind`` is damaged, read_only or full; ``status`` the HTTP
    status an upload is refused with (507 Insufficient Storage for a full disk, else 503)."""

    kind: str
    reason: str

    @property
    def status(self) -> int:
        return 507 if self.kind == "full" else 503


def storage_problem(exc: BaseException) -> StorageProblem | None:
    """The condition a driver error reports, or None for any other error (a lock, a bad query)."""
    text = str(getattr(exc, "orig", None) or exc).splitlines()[0] if str(exc) else type(exc).__name__
    if _FULL.search(text):
        return StorageProblem("full", f"the database's disk is full ({text}); free space, then retry")
    if _READ_ONLY.search(text):
        return StorageProblem("read_only", f"the database is read-only ({text}); make it writable, then retry")
    if _DAMAGED.search(text):
        return StorageProblem("damaged", f"the database file is damaged ({text}); restore it from a backup")
    return None


def check_integrity(engine: Engine, *, write_probe: bool = True) -> StorageProblem | None:
    """Quick integrity check (SQLite) and a rolled-back write probe, on a connection of its own."""
    if engine.url.get_backend_name() == "sqlite" and engine.url.database in (None, "", ":memory:"):
        return None  # a private in-memory database: nothing on disk, and another connection would not see it
    dialect = engine.dialect
    arguments, options = dialect.create_connect_args(engine.url)
    try:
        connection = dialect.connect(*arguments, **options)
    except Exception as exc:  # cannot even open it: the error names why
        return storage_problem(exc) or StorageProblem("unreachable", f"cannot open the database ({exc})".splitlines()[0])
    try:
        if engine.url.get_backend_name() == "sqlite":
            return _check_sqlite(connection, write_probe)
        if write_probe:
            cursor = connection.cursor()
            try:
                cursor.execute(WRITE_PROBE)
            finally:
                connection.rollback()
        return None
    except Exception as exc:
        return storage_problem(exc) or StorageProblem("unusable", f"the database check failed ({type(exc).__name__}: {exc})".splitlines()[0])
    finally:
        connection.close()


def sqlite_file(engine: Engine) -> str | None:
    """The path of an SQLite engine's database file (None: another backend, or in memory)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    uri = url.query.get("uri") == "true" and url.database.startswith("file:")
    return url.database.removeprefix("file:").split("?", 1)[0] if uri else url.database


def header_problem(engine: Engine) -> StorageProblem | None:
    """What an SQLite file's header and size say is wrong, without a query (see the module docstring);
    None for another backend, a file that looks whole, or one that cannot be read (the queries say why)."""
    path = sqlite_file(engine)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return None
    if len(header) < 100 or header[:16] != SQLITE_MAGIC:
        return StorageProblem("damaged", f"the database file is damaged (its header is not SQLite's: {size} bytes, "
                              f"starting {header[:16]!r}); restore it from a backup")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages, valid = int.from_bytes(header[28:32], "big"), header[24:28] == header[92:96]
    if valid and page_size and size < pages * page_size:
        return StorageProblem("damaged", f"the database file is damaged (truncated: {size} bytes, its header counts "
                              f"{pages} pages of {page_size}); restore it from a backup")
    return None


def _check_sqlite(connection, write_probe: bool) -> StorageProblem | None:  # noqa: ANN001 - sqlite3.Connection
    connection.isolation_level = None  # explicit BEGIN / ROLLBACK below
    found = [row[0] for row in connection.execute(f"PRAGMA quick_check({QUICK_CHECK_ERRORS})")]
    if found != ["ok"]:
        lines = [part for line in found for part in str(line).splitlines()]
        return StorageProblem("damaged", f"the database file is damaged (SQLite quick_check: {'; '.join(lines)}); "
                              "restore it from a backup")
    if write_probe:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(WRITE_PROBE)
        finally:
            connection.execute("ROLLBACK")
    return None
