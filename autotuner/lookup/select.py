"""``select_kernel(m, n, dtype, gpu=None)``: the embedded lookup an inference runtime calls.

Imports neither torch nor CuPy. Tables come from the package's shipped JSON (``autotuner/tables``)
and, where a tuning database exists, its current fitted tables, which take precedence. Answers are
cached per (m, n, dtype, gpu, method): a warm lookup is one dict probe.

Which table answers: the GPU's own table, and only it, where it has one; a table predicted for a GPU
never measured (``autotuner predict``, ``source`` "predicted") is its own table until a measured table
of the same key replaces it, and answers for no other GPU but a model of the very same specs
(``gpu_models.same_specs``: the A800 reads the A100's). A GPU without a table is
answered, with a warning, from the table of the nearest model of the same or an older architecture
(``gpu_models.donor_order``), offering only the kernels this GPU runs (``gpu_models.runs_on``); a
GPU without a table and without such a model (or of a model ``gpu_models`` does not list) gets
``torch_softmax``, which is correct everywhere torch runs; a GPU name that is neither a table's nor
listed in ``gpu_models`` is warned about once, naming the known models. Within a table, its decision
index answers (``DispatchTable.answer``, written by the fit from its rule): the table's rule inside
its measured points (``source`` "table"), a per-candidate scaling model outside them ("model"),
``torch_softmax`` where nothing measured vouches for a candidate or no candidate admits the shape
("fallback"). ``reason`` says which fallback, in words. M = 0 (no rows: nothing is launched) answers
the kernel M = 1 would run, with ``predicted_us`` 0 and a ``reason`` saying so; ``/dispatch`` and
``autotuner select`` answer it alike, through this lookup.
"""
from __future__ import annotations

import json
import threading
import warnings
from operator import index
from pathlib import Path

from autotuner.domain import MAX_DIM
from autotuner.lookup.gpu import current_gpu_key, validate_gpu_key
from autotuner.lookup.gpu_models import GPU_MODELS, donor_order, gpu_spec, same_specs
from autotuner.lookup.choice import FALLBACK_VARIANT, KernelChoice, TableReader
from autotuner.lookup.table import DispatchTable, TableFormatError
from kernels.dtypes import DTYPE_ALIASES, normalize_dtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a first lookup's import stays light
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping


def _warn(message: str, *args: Any) -> None:
    """A warning through this module's logger; logging is imported here, not at the top: a first
    lookup in a fresh process must not pay its import (about 6 ms of a 50 ms bound) to warn never."""
    import logging

    logging.getLogger(__name__).warning(message, *args)

DEFAULT_METHOD = "cold"
CACHE_LIMIT = 1 << 16  # answers kept per store; a server fed endless new shapes must not grow forever
SPELLINGS_KEPT = 64  # (dtype, gpu, method) spellings whose new shapes go straight to their table's reader


_gpu_keys: dict[str, str] = {}  # a caller's GPU spelling -> its validated key
_warned_gpus: set[str] = set()  # unknown GPU names already warned about (at most 64 kept)
ZERO_ROWS_REASON = "M = 0: no rows, nothing is launched; the kernel M = 1 would run"


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


class TableStore:
    """The tables a process answers from, keyed by (gpu, dtype, timing method). A table may be added
    as a loader (:meth:`add_lazy`), read on its key's first use: a process that looks up one GPU and
    dtype parses one shipped file, not all of them."""

    def __init__(self, tables: Iterable[DispatchTable] = (), *, cache_limit: int | None = None):
        self._tables: dict[tuple[str, str, str], DispatchTable] = {}
        self._pending: dict[tuple[str, str, str], Callable[[], DispatchTable | None]] = {}
        self._cache: dict[tuple[int, int, Any, str | None, str], KernelChoice] = {}
        # (table, gpu, source: None for the GPU's own table) -> the table's answers on that GPU
        self._readers: dict[tuple[DispatchTable, str, str | None], TableReader] = {}
        # a caller's (dtype, gpu or None, method) as spelled -> its GPU's own table's reader: a new shape's
        # path, no name normalised again (at most SPELLINGS_KEPT; another spelling takes the long way)
        self._spelled: dict[tuple[Any, str, str], TableReader] = {}
        # Each cached answer is a few garbage-collected objects; a process that caches answers
        # elsewhere (the service caches response bytes) keeps this small so full GC passes stay short.
        self._cache_limit = CACHE_LIMIT if cache_limit is None else cache_limit
        self._lock = threading.Lock()
        self.generation = 0  # counts the changes of the tables: what answering_view gave is valid while it stands
        for table in tables:
            self.add(table)

    def add(self, table: DispatchTable) -> None:
        with self._lock:
            self._pending.pop(table.key, None)
            self._tables[table.key] = table
            self._cache.clear()
            self._readers.clear()
            self._spelled.clear()
            self.generation += 1

    def add_lazy(self, key: tuple[str, str, str], load: Callable[[], DispatchTable | None]) -> None:
        """Answer ``key`` from ``load()``'s table, called on the key's first use (None, or a table of
        another key, which is not used: no table)."""
        with self._lock:
            self._tables.pop(key, None)
            self._pending[key] = load
            self._cache.clear()
            self._readers.clear()
            self._spelled.clear()
            self.generation += 1

    def replace_all(self, tables: Iterable[DispatchTable]) -> None:
        fresh = {t.key: t for t in tables}
        with self._lock:
            self._tables = fresh
            self._pending = {}
            self._cache.clear()
            self._readers.clear()
            self._spelled.clear()
            self.generation += 1

    def _table(self, key: tuple[str, str, str]) -> DispatchTable | None:
        table = self._tables.get(key)
        if table is None and key in self._pending:
            with self._lock:
                load = self._pending.pop(key, None)
                if load is not None:
                    loaded = load()
                    if loaded is not None and loaded.key != key:
                        _warn("a table loaded for %s is of %s: not used", "/".join(key), "/".join(loaded.key))
                    elif loaded is not None:
                        self._tables[key] = loaded
                table = self._tables.get(key)
        return table

    def _load_all(self) -> None:
        for key in list(self._pending):
            self._table(key)

    def gpus(self) -> list[str]:
        self._load_all()  # a file that fails to load must not list its GPU
        return sorted({key[0] for key in self._tables})

    def tables(self) -> list[DispatchTable]:
        self._load_all()
        return [self._tables[k] for k in sorted(self._tables)]

    def get(self, gpu: str, dtype: str, method: str = DEFAULT_METHOD) -> DispatchTable | None:
        return self._table((gpu, dtype, method))

    def select(self, m: int, n: int, dtype: str, gpu: str | None = None, method: str = DEFAULT_METHOD,
               *, allow_fallback: bool = True) -> KernelChoice:
        key = (m, n, dtype, gpu, method)  # as spelled: None and "" are two keys of the current GPU
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        return self._first(key, m, n, dtype, gpu, method, allow_fallback)

    def select_canonical(self, m: int, n: int, dtype: str, gpu_key: str, method: str = DEFAULT_METHOD,
                         *, allow_fallback: bool = True) -> KernelChoice:
        """``select`` for a caller that has already validated the shape and normalised the names
        (``normalize_dtype``, ``validate_gpu_key``), as the service has: nothing is normalised twice."""
        key = (m, n, dtype, gpu_key, method)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        return self._keep(key, self._choose(m, n, dtype, gpu_key, method, allow_fallback))

    def _keep(self, key: tuple[int, int, str, str, str], choice: KernelChoice) -> KernelChoice:
        if len(self._cache) >= self._cache_limit:
            self._cache.clear()  # cheap and rare; the working set refills in microseconds per shape
        self._cache[key] = choice
        return choice

    def _first(self, key: tuple[int, int, Any, str, str], m: int, n: int, dtype: str, gpu: str | None, method: str,
               allow_fallback: bool = True) -> KernelChoice:
        """``select``'s answer for ``key`` (its arguments), not cached: answered, then cached. Where
        the spelling of (dtype, gpu, method) has met the GPU's own table, that table's reader answers
        a shape of plain ints at once; anything else takes the long way (checks, names, fallbacks)."""
        reader = self._spelled.get((dtype, gpu, method))
        if reader is not None and type(m) is int and type(n) is int and 0 < m <= MAX_DIM and 0 < n <= MAX_DIM:
            return self._keep(key, reader.choice(m, n))
        return self._keep(key, self._select_uncached(m, n, dtype, gpu, method, allow_fallback))

    def _select_uncached(self, m, n, dtype_name, gpu, method, allow_fallback) -> KernelChoice:
        if type(m) is not int or type(n) is not int:  # plain ints skip the conversion
            m, n = _integer_dims(m, n)
        if not (0 <= m <= MAX_DIM and 1 <= n <= MAX_DIM):
            raise ValueError(f"shape ({m}, {n}) out of range: need 0 <= m < 2**31 and 1 <= n < 2**31")
        # a spelling already in canonical form skips the normaliser (a first lookup is on the dispatch path)
        dtype = DTYPE_ALIASES.get(dtype_name) if type(dtype_name) is str else None
        dtype = dtype or normalize_dtype(dtype_name)
        gpu_key = (_gpu_keys.get(gpu) or _gpu_key(gpu)) if gpu else (current_gpu_key() or "unknown")
        own = self._table((gpu_key, dtype, method))
        if own is not None and m:  # the usual case: this spelling's next new shapes take the short way
            reader = self._reader(own, gpu_key, None)
            if len(self._spelled) < SPELLINGS_KEPT:
                with self._lock:  # a table replaced meanwhile must not answer there
                    if self._tables.get(own.key) is own:
                        self._spelled[(dtype_name, gpu, method)] = reader
            return reader.choice(m, n)
        return self._choose(m, n, dtype, gpu_key, method, allow_fallback)

    def _choose(self, m: int, n: int, dtype: str, gpu_key: str, method: str, allow_fallback: bool) -> KernelChoice:
        """The choice for canonical names: the GPU's own table, then the fallbacks in order."""
        own = self._table((gpu_key, dtype, method))
        if own is not None:  # never another GPU's table where this GPU has its own
            return self._answer(own, gpu_key, m, n, None)
        if not allow_fallback:
            raise UnknownGpuError(gpu_key, self.gpus())
        spec = gpu_spec(gpu_key)
        if spec is None and gpu_key != "unknown" and gpu_key not in _warned_gpus and len(_warned_gpus) < 64:
            _warned_gpus.add(gpu_key)
            known = sorted(set(GPU_MODELS) | set(self.gpus()))
            warnings.warn(f"GPU {gpu_key!r} is not a model the lookup knows (known: {', '.join(known)}): "
                          f"answering {FALLBACK_VARIANT}", RuntimeWarning, stacklevel=5)
        borrowed = self._borrowed(gpu_key, dtype, method)
        if borrowed is None:
            known = "its architecture is not listed in autotuner/lookup/gpu_models.py" if spec is None else \
                f"no table of a model of sm_{spec.compute_capability} or older"
            reason = f"no {dtype}/{method} dispatch table for GPU {gpu_key!r} and {known}" if gpu_key != "unknown" else \
                "no GPU found on this host and none named: pass gpu (a model key, e.g. 'h100')"
            return KernelChoice(FALLBACK_VARIANT, (), None, gpu_key, dtype, "fallback", False, reason)
        table, source, reason = borrowed
        if source != "predicted":  # another model's measurements: said (once per place, as warnings are)
            warnings.warn(reason, RuntimeWarning, stacklevel=5)
        choice = self._answer(table, gpu_key, m, n, source)
        return choice if choice.source == "fallback" else choice._replace(reason=reason)

    def _borrowed(self, gpu_key: str, dtype: str, method: str) -> tuple[DispatchTable, str, str] | None:
        """(table, source, reason) that a GPU without a table of its own answers from, or None: a
        prediction for a model of the very same figures (it is this GPU's too), else the first measured
        donor of ``donor_order``, among the kernels this GPU runs; None for a GPU not listed."""
        spec = gpu_spec(gpu_key)
        if spec is None:
            return None
        twin = next((t for g in same_specs(spec, self.gpus()) if (t := self.get(g, dtype, method)) and is_predicted(t)),
                    None)
        if twin is not None:
            return twin, "predicted", \
                f"predicted for {twin.gpu}, a model of the same specs as {gpu_key!r} (autotuner/lookup/gpu_models.py)"
        measured = [g for g in self.gpus() if (t := self.get(g, dtype, method)) and not is_predicted(t)]
        donors = donor_order(spec, measured)
        if not donors:
            return None
        donor = donors[0]
        return self.get(donor, dtype, method), f"nearest-gpu:{donor}", (
            f"no {dtype}/{method} dispatch table for GPU {gpu_key!r}; answered from the {donor} table "
            f"(sm_{gpu_spec(donor).compute_capability} <= sm_{spec.compute_capability}) with the kernels "
            f"{gpu_key!r} runs")

    def _answer(self, table: DispatchTable, gpu_key: str, m: int, n: int, source: str | None) -> KernelChoice:
        """``table``'s answer for (m, n) on ``gpu_key``, among the candidates that GPU runs; ``source``
        None: ``table`` is the GPU's own."""
        if m == 0:
            choice = self._answer(table, gpu_key, 1, n, source)
            return choice._replace(predicted_us=0.0, exact=False, reason=ZERO_ROWS_REASON)
        return self._reader(table, gpu_key, source).choice(m, n)

    def _reader(self, table: DispatchTable, gpu_key: str, source: str | None) -> TableReader:
        """``table``'s reader on ``gpu_key`` for ``source`` (None: the GPU's own table), made on first
        use and kept until the tables change."""
        key = (table, gpu_key, source)
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = \
                TableReader(table, gpu_key, source or ("predicted" if is_predicted(table) else "table"))
        return reader

    def answering_view(self, gpu_key: str, dtype: str,
                       method: str = DEFAULT_METHOD) -> tuple[DispatchTable, int] | None:
        """The table that ``select`` answers ``gpu_key`` from (its own; else the one it borrows: a
        twin's prediction or a donor's, ``_borrowed``) and the view of it, for a caller that reads picks
        with ``DispatchTable.pick`` (the runtime's new shapes, M >= 1): ``select``'s answer for every
        (m, n) is then ``table.candidates[table.pick(m, n, view)]``, or the fallback where it is None.
        None where ``select`` answers otherwise (no table: the fallback; no view of exactly this GPU's
        kernels). Valid while ``generation`` is unchanged."""
        answering = self.answering_table(gpu_key, dtype, method)
        if answering is None:
            return None
        table, source = answering
        reader = self._reader(table, gpu_key, source)
        return None if reader.runnable is not None else (table, reader.view)

    def answering_table(self, gpu_key: str, dtype: str,
                        method: str = DEFAULT_METHOD) -> tuple[DispatchTable, str | None] | None:
        """(table, source) of the table ``select`` answers ``gpu_key`` from: its own (source None), else
        the one it borrows (``_borrowed``); None where it has neither (the fallback)."""
        own = self._table((gpu_key, dtype, method))
        if own is not None:
            return own, None
        borrowed = self._borrowed(gpu_key, dtype, method)
        return None if borrowed is None else borrowed[:2]


def is_predicted(table: DispatchTable) -> bool:
    """A table predicted for a GPU never measured (``autotuner predict``): it answers for its own GPU
    only, and only while that GPU has no measured table of its key (a measured one replaces it)."""
    return table.document.get("source") == "predicted"


def load_table_files(paths: Iterable[Path]) -> list[DispatchTable]:
    """The tables in ``paths`` (a file that cannot be read is warned about and left out)."""
    return [table for path in paths if (table := _load_or_warn(path)) is not None]


def _integer_dims(m: Any, n: Any) -> tuple[int, int]:
    """(m, n) as ints where each is an integer of any kind (numpy's, a 0-d integer tensor: what
    ``operator.index`` takes); TypeError naming what was given otherwise (a bool too, as a dim)."""
    try:
        if isinstance(m, bool) or isinstance(n, bool):
            raise TypeError
        return index(m), index(n)
    except TypeError:
        raise TypeError(f"m and n must be integers, got {type(m).__name__} and {type(n).__name__}") from None


def shipped_table_files() -> list[Path]:
    # the package's own folder (importlib.resources would cost the first lookup about 5 ms of imports)
    folder = Path(__file__).resolve().parent.parent / "tables"
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
        table = _load_or_warn(path)
        if table is not None:
            tables.append(table)
    return tables


def _load_or_warn(path: Path) -> DispatchTable | None:
    try:
        return load_table_file(path)
    except TableFormatError as exc:  # one bad file must not hide the others
        _warn("%s", exc)
        return None


def add_shipped_tables(store: TableStore) -> None:
    """Add the shipped tables to ``store``, each read on first use where its file name
    (``<gpu>_<dtype>_<method>.json``) names its key, at once otherwise."""
    for path in shipped_table_files():
        parts = path.stem.rsplit("_", 2)
        if len(parts) == 3:
            store.add_lazy((parts[0], parts[1], parts[2]), lambda path=path: _load_or_warn(path))
        elif (table := _load_or_warn(path)) is not None:
            store.add(table)


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
                store = TableStore()
                add_shipped_tables(store)  # each file read on its first lookup: start-up stays light
                for table in _database_tables():
                    store.add(table)
                _default_store = store
    return _default_store


def reset_default_store() -> None:
    global _default_store
    _default_store = None


_table_sources: list[Callable[[], list[DispatchTable]]] = []


def add_table_source(source: Callable[[], list[DispatchTable]]) -> None:
    """Register a callable whose tables overlay the shipped ones in ``default_store`` (``autotuner``
    registers the default tuning database's current tables; the lookup itself imports no ``db``)."""
    _table_sources.append(source)


def _database_tables() -> list[DispatchTable]:
    """The registered sources' tables, in registration order."""
    return [table for source in _table_sources for table in source()]


def select_kernel(m: int, n: int, dtype: str, gpu: str | None = None, *, timing_method: str = DEFAULT_METHOD) -> KernelChoice:
    """The kernel to run for an (m, n) softmax over the last dimension in ``dtype`` on ``gpu``
    (default: the current device's model). Never raises for a valid shape: see the fallbacks above."""
    # the warm path inlined (one dict probe): TableStore.select's cache, keyed as it keys it
    store = _default_store or default_store()
    key = (m, n, dtype, gpu, timing_method)
    cache = store._cache
    hit = cache.get(key)
    if hit is not None:
        return hit
    # and TableStore._first's short way for a new shape, inlined
    reader = store._spelled.get((dtype, gpu, timing_method))
    if reader is None or type(m) is not int or type(n) is not int or not (0 < m <= MAX_DIM and 0 < n <= MAX_DIM):
        return store._first(key, m, n, dtype, gpu, timing_method)
    choice = reader.choice(m, n)
    if len(cache) >= store._cache_limit:
        cache.clear()
    cache[key] = choice
    return choice
