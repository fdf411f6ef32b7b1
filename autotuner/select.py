"""``select_kernel(m, n, dtype, gpu=None)``: the embedded lookup an inference runtime calls.

Imports neither torch nor CuPy. Tables come from the package's shipped JSON (``autotuner/tables``)
and, where a tuning database exists, its current fitted tables, which take precedence. Answers are
cached per (m, n, dtype, gpu, method): a warm lookup is one dict probe.

Fallbacks, in order: the GPU's own table; the nearest GPU model's table (``gpu.NEAREST_MODELS``,
then any table of that dtype) with a warning; the rule ``torch_softmax`` for any shape, which is
correct everywhere torch runs.
"""
from __future__ import annotations

import json
import logging
import threading
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

from autotuner.gpu import NEAREST_MODELS, current_gpu_key, validate_gpu_key
from autotuner.table import DispatchTable, TableFormatError
from kernels.base import DTYPE_ALIASES, normalize_dtype

log = logging.getLogger(__name__)

FALLBACK_VARIANT = "torch_softmax"
DEFAULT_METHOD = "cold"
MAX_DIM = 1 << 31
CACHE_LIMIT = 1 << 16  # answers kept per store; a server fed endless new shapes must not grow forever


_gpu_keys: dict[str, str] = {}  # a caller's GPU spelling -> its validated key


def _gpu_key(gpu: str) -> str:
    key = _gpu_keys.get(gpu)
    if key is None:
        key = validate_gpu_key(gpu)  # raises on a bad spelling, which is then never kept
        if len(_gpu_keys) < 64:
            _gpu_keys[gpu] = key
    return key


class UnknownGpuError(LookupError):
    """No table for this GPU model (only raised where fallback is disabled)."""

    def __init__(self, gpu: str, known: Iterable[str]):
        self.gpu = gpu
        self.known = sorted(set(known))
        super().__init__(f"no dispatch table for GPU {gpu!r}; known: {', '.join(self.known) or 'none'}")


@dataclass(frozen=True)
class KernelChoice:
    """What to run for one shape. ``config`` is a fresh plain dict on every access."""

    variant: str
    config_items: tuple[tuple[str, Any], ...]
    predicted_us: float | None
    gpu: str
    dtype: str
    source: str  # "table" | "nearest-gpu:<key>" | "fallback"
    exact: bool = False  # the shape itself was measured

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.config_items)

    @property
    def config_key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config_items)

    def as_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "config": self.config, "config_key": self.config_key,
            "predicted_us": self.predicted_us, "gpu": self.gpu, "dtype": self.dtype,
            "source": self.source, "exact": self.exact,
        }


class TableStore:
    """The tables a process answers from, keyed by (gpu, dtype, timing method)."""

    def __init__(self, tables: Iterable[DispatchTable] = (), *, cache_limit: int | None = None):
        self._tables: dict[tuple[str, str, str], DispatchTable] = {}
        self._cache: dict[tuple[int, int, str, str, str], KernelChoice] = {}
        # Each cached answer is a few garbage-collected objects; a process that caches answers
        # elsewhere (the service caches response bytes) keeps this small so full GC passes stay short.
        self._cache_limit = CACHE_LIMIT if cache_limit is None else cache_limit
        self._lock = threading.Lock()
        for table in tables:
            self.add(table)

    def add(self, table: DispatchTable) -> None:
        with self._lock:
            self._tables[table.key] = table
            self._cache.clear()

    def replace_all(self, tables: Iterable[DispatchTable]) -> None:
        fresh = {t.key: t for t in tables}
        with self._lock:
            self._tables = fresh
            self._cache.clear()

    def gpus(self) -> list[str]:
        return sorted({key[0] for key in self._tables})

    def tables(self) -> list[DispatchTable]:
        return [self._tables[k] for k in sorted(self._tables)]

    def get(self, gpu: str, dtype: str, method: str = DEFAULT_METHOD) -> DispatchTable | None:
        return self._tables.get((gpu, dtype, method))

    def select(self, m: int, n: int, dtype: str, gpu: str | None = None, method: str = DEFAULT_METHOD,
               *, allow_fallback: bool = True) -> KernelChoice:
        key = (m, n, dtype, gpu or "", method)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        choice = self._select_uncached(m, n, dtype, gpu, method, allow_fallback)
        if len(self._cache) >= self._cache_limit:
            self._cache.clear()  # cheap and rare; the working set refills in microseconds per shape
        self._cache[key] = choice
        return choice

    def _select_uncached(self, m, n, dtype_name, gpu, method, allow_fallback) -> KernelChoice:
        if not isinstance(m, int) or not isinstance(n, int) or isinstance(m, bool) or isinstance(n, bool):
            raise TypeError(f"m and n must be integers, got {type(m).__name__} and {type(n).__name__}")
        if not (0 <= m < MAX_DIM and 1 <= n < MAX_DIM):
            raise ValueError(f"shape ({m}, {n}) out of range: need 0 <= m < 2**31 and 1 <= n < 2**31")
        # a spelling already in canonical form skips the normaliser (a first lookup is on the dispatch path)
        dtype = DTYPE_ALIASES.get(dtype_name) if type(dtype_name) is str else None
        dtype = dtype or normalize_dtype(dtype_name)
        gpu_key = _gpu_key(gpu) if gpu else (current_gpu_key() or "unknown")
        choice = self._from_table(gpu_key, gpu_key, m, n, dtype, method, "table")
        if choice is not None:
            return choice
        if not allow_fallback:
            raise UnknownGpuError(gpu_key, self.gpus())
        others = [*NEAREST_MODELS.get(gpu_key, ()), *(g for g in self.gpus() if g != gpu_key)]
        for other in others:  # the fallback order is built only when the GPU's own table has no answer
            choice = self._from_table(other, gpu_key, m, n, dtype, method, f"nearest-gpu:{other}")
            if choice is not None:
                warnings.warn(f"no {dtype}/{method} dispatch table for GPU {gpu_key!r}; using {other!r}'s",
                              RuntimeWarning, stacklevel=4)
                return choice
        return KernelChoice(FALLBACK_VARIANT, (), None, gpu_key, dtype, "fallback", False)

    def _from_table(self, table_gpu: str, gpu_key: str, m: int, n: int, dtype: str, method: str,
                    source: str) -> KernelChoice | None:
        """``table_gpu``'s table's answer for (m, n), or None where it has no table or no answer."""
        table = self.get(table_gpu, dtype, method)
        pick = table.lookup(m, n) if table is not None else None
        if pick is None:
            return None
        entry = table.candidates[pick.candidate]
        return KernelChoice(entry["variant"], tuple(entry["config"].items()), pick.predicted_us,
                            gpu_key, dtype, source, pick.exact)


def shipped_table_files() -> list[Path]:
    folder = Path(str(resources.files("autotuner") / "tables"))
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def load_table_file(path: Path) -> DispatchTable:
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TableFormatError(f"cannot read dispatch table {path}: {exc}") from None
    try:
        return DispatchTable(document)
    except TableFormatError as exc:
        raise TableFormatError(f"{path}: {exc}") from None


def load_shipped_tables() -> list[DispatchTable]:
    tables = []
    for path in shipped_table_files():
        try:
            tables.append(load_table_file(path))
        except TableFormatError as exc:  # one bad file must not hide the others
            log.warning("%s", exc)
    return tables


def tables_from_documents(documents: Iterable[Mapping[str, Any]]) -> list[DispatchTable]:
    return [DispatchTable(doc) for doc in documents]


_default_store: TableStore | None = None
_default_lock = threading.Lock()


def default_store() -> TableStore:
    """Shipped tables overlaid by the default database's current tables (if that database exists)."""
    global _default_store
    if _default_store is None:
        with _default_lock:
            if _default_store is None:
                store = TableStore(load_shipped_tables())
                for table in _database_tables():
                    store.add(table)
                _default_store = store
    return _default_store


def reset_default_store() -> None:
    global _default_store
    _default_store = None


def _database_tables() -> list[DispatchTable]:
    """Current tables of the default database, only if its file already exists (never creates one)."""
    from db.location import chosen_database_url, missing_sqlite_file  # imports no SQLAlchemy

    url = chosen_database_url()
    if missing_sqlite_file(url):
        return []
    try:  # a database is configured: only now are SQLAlchemy and the db package imported
        from autotuner.store import tables_in_database

        return tables_in_database(url)
    except Exception as exc:  # an unreadable database leaves the shipped tables in force
        log.warning("ignoring the tuning database's tables: %s", exc)
        return []


def select_kernel(m: int, n: int, dtype: str, gpu: str | None = None, *, timing_method: str = DEFAULT_METHOD) -> KernelChoice:
    """The kernel to run for an (m, n) softmax over the last dimension in ``dtype`` on ``gpu``
    (default: the current device's model). Never raises for a valid shape: see the fallbacks above."""
    # the warm path inlined (one dict probe): TableStore.select's cache, keyed as it keys it
    store = _default_store or default_store()
    hit = store._cache.get((m, n, dtype, gpu or "", timing_method))
    return hit if hit is not None else store.select(m, n, dtype, gpu, timing_method)
