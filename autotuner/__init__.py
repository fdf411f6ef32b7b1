"""Softmax kernel-selection autotuner: sweep, fit, lookup, run.

``select_kernel`` imports neither torch nor CuPy; ``softmax`` imports torch when first accessed, ``warmup`` when called.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lookup's import stays light
if TYPE_CHECKING:
    from typing import Any

from autotuner.lookup.select import KernelChoice, add_table_source, select_kernel

__all__ = ["KernelChoice", "__version__", "select_kernel", "softmax", "warmup"]


def __getattr__(name: str) -> Any:
    """``autotuner.softmax`` is ``autotuner.runtime.softmax`` itself (no wrapper's call on the hot
    path), imported, with torch, on its first access; ``__version__`` from the package metadata."""
    if name == "softmax":
        from autotuner.runtime import softmax

        globals()["softmax"] = softmax
        return softmax
    if name == "__version__":  # read on first access: importlib.metadata costs the lookup's import several ms
        from autotuner._version import package_version

        return package_version()
    raise AttributeError(f"module 'autotuner' has no attribute {name!r}")


def warmup(gpu: str | None = None, dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16"), progress: Any = None,
           native: bool = True) -> dict[str, Any]:
    """Compile every kernel instance the GPU's tables can pick and build the native launch module,
    so that a server's first requests pay no compile (``autotuner.runtime_warmup.warmup``)."""
    from autotuner.runtime_warmup import warmup as _warmup

    return _warmup(gpu, dtypes, progress, native)


def _default_database_tables() -> list[Any]:
    # called when the default store is first built. An SQLite database keeps its current tables as
    # files beside it (db/location.py), read here without SQLAlchemy (about 0.3 s of imports and a
    # read): an empty database costs a glob. SQLAlchemy is imported only for a database whose tables
    # are not known from files (another server, or a file made before the folder existed and not yet
    # opened by a writer), and nothing at all where no database file exists
    from autotuner.lookup.select import load_table_files
    from db.location import chosen_database_url, missing_sqlite_file, mirrored_table_files

    url = chosen_database_url()
    if missing_sqlite_file(url):
        return []
    files = mirrored_table_files(url)
    if files is not None:
        return load_table_files(files)
    try:
        from autotuner.records.store import default_database_tables
    except ImportError as exc:  # a database but no SQLAlchemy: the shipped tables still answer
        import warnings

        warnings.warn(f"the tuning database {url} is not read ({exc}; `pip install sqlalchemy` reads it): "
                      f"answering from the shipped tables", RuntimeWarning, stacklevel=2)
        return []
    return default_database_tables()


add_table_source(_default_database_tables)
