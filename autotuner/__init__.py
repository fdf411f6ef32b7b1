"""Softmax kernel-selection autotuner: sweep, fit, lookup, run.

``select_kernel`` imports neither torch nor CuPy; ``softmax`` imports torch when first called.
"""
from __future__ import annotations

from typing import Any

from autotuner.lookup.select import KernelChoice, add_table_source, select_kernel

__all__ = ["KernelChoice", "__version__", "select_kernel", "softmax"]


def __getattr__(name: str) -> Any:
    # ``__version__`` read on first access: importlib.metadata costs the lookup's import several ms
    if name == "__version__":
        from autotuner._version import package_version

        return package_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def softmax(x: Any, dim: int = -1) -> Any:
    """Softmax over ``dim`` with the kernel the dispatch table picks for this GPU and shape."""
    from autotuner.runtime import softmax as _softmax

    return _softmax(x, dim)


def _default_database_tables() -> list[Any]:
    # called when the default store is first built; SQLAlchemy is imported only where a database file
    # exists (db.location answers that without it), so a lookup with no database never loads it
    from db.location import chosen_database_url, missing_sqlite_file

    url = chosen_database_url()
    if missing_sqlite_file(url):
        return []
    try:
        from autotuner.records.store import default_database_tables
    except ImportError as exc:  # a database but no SQLAlchemy: the shipped tables still answer
        import warnings

        warnings.warn(f"the tuning database {url} is not read ({exc}; `pip install sqlalchemy` reads it): "
                      f"answering from the shipped tables", RuntimeWarning, stacklevel=2)
        return []
    return default_database_tables()


add_table_source(_default_database_tables)
