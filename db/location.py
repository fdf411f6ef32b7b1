"""Where the tuning database is, and its current tables as files, worked out without importing SQLAlchemy.

The embedded lookup (``select_kernel``) asks "which fitted tables does the configured database hold?"
on its first call; answering that must not cost SQLAlchemy's import and a database read (about 0.3 s)
on a host whose database holds no fitted table, or fail on one without SQLAlchemy installed.

So an SQLite database keeps its current tables as files too, in a folder beside it
(``tuning.sqlite.tables/``, one ``<gpu>_<dtype>_<method>.json`` per current table), with a mark
(``COMPLETE_MARK``) that says the folder holds every one of them. The database stays the source of
truth; ``db.mirror`` writes the folder: on creating the schema (an empty folder, marked), at every
stored table, and, for a database made before the folder existed, at the first open by a writer.
A reader trusts the folder only where the mark is; without it, or for a server database
(PostgreSQL: no file to keep beside it), it reads the database. ``db.engine`` builds on these and
validates the URL.
"""
from __future__ import annotations

from kernels.settings import settings

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the embedded lookup imports this module
if TYPE_CHECKING:
    from pathlib import Path

ENV_VAR = "AUTOTUNER_DB"
SQLITE_PREFIX = "sqlite:///"
COMPLETE_MARK = "COMPLETE"  # in the tables folder: it holds every current table of the database beside it


def default_database_path() -> Path:
    return settings.data_home / "softmax-autotuner" / "tuning.sqlite"


def chosen_database_url(url: str | None = None) -> str:
    """Explicit URL, else ``$AUTOTUNER_DB``, else the default SQLite file; a bare path becomes an
    SQLite URL. Not validated (``db.engine.resolve_database_url`` does that)."""
    from pathlib import Path

    chosen = url or settings.database or str(default_database_path())
    if "://" not in chosen:
        chosen = f"{SQLITE_PREFIX}{Path(chosen).expanduser().resolve()}"
    return chosen


def is_default_database(url: str | None) -> bool:
    """No URL given and none in the environment: the default file, which a fresh install has not made yet."""
    return url is None and settings.database is None


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL (``sqlite:///PATH``), None for another database or one in memory."""
    from pathlib import Path

    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url.removeprefix(SQLITE_PREFIX).partition("?")[0]
    return Path(path.removeprefix("file:")) if path and path != ":memory:" else None


def missing_sqlite_file(url: str) -> bool:
    """True for an SQLite URL whose file does not exist: readers skip it rather than create it."""
    path = sqlite_file(url)
    return path is not None and not path.exists()


def tables_folder(database: Path) -> Path:
    """The folder of the current tables' files of the SQLite database file ``database``."""
    return database.with_name(database.name + ".tables")


def mirrored_table_files(url: str) -> list[Path] | None:
    """The current tables' files of the database at ``url`` (empty: it holds no fitted table); None where
    they cannot be known without reading the database (not an SQLite file, or no complete folder)."""
    database = sqlite_file(url)
    if database is None:
        return None
    folder = tables_folder(database)
    if not (folder / COMPLETE_MARK).is_file():
        return None
    return sorted(folder.glob("*.json"))
