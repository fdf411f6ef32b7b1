"""Where the tuning database is, worked out without importing SQLAlchemy.

The embedded lookup (``select_kernel``) asks only "is a database configured, and does its file
exist?"; answering that must not cost SQLAlchemy's import (about 200 ms) on a host that has no
database, or fail on one without SQLAlchemy installed. ``db.engine`` builds on these and validates
the URL.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "AUTOTUNER_DB"
SQLITE_PREFIX = "sqlite:///"


def default_database_path() -> Path:
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data_home / "softmax-autotuner" / "tuning.sqlite"


def chosen_database_url(url: str | None = None) -> str:
    """Explicit URL, else ``$AUTOTUNER_DB``, else the default SQLite file; a bare path becomes an
    SQLite URL. Not validated (``db.engine.resolve_database_url`` does that)."""
    chosen = url or os.environ.get(ENV_VAR) or str(default_database_path())
    if "://" not in chosen:
        chosen = f"{SQLITE_PREFIX}{Path(chosen).expanduser().resolve()}"
    return chosen


def missing_sqlite_file(url: str) -> bool:
    """True for an SQLite URL whose file does not exist: readers skip it rather than create it."""
    return url.startswith(SQLITE_PREFIX) and not Path(url.removeprefix(SQLITE_PREFIX)).exists()
