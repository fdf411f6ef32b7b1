"""A dispatch table as the lookup reads it: its decision index. No torch, no CuPy, no rule.

A table is versioned JSON, one per (GPU model, dtype, timing method)::

    {"format_version": 2, "gpu": "h100", "gpu_name": "...", "dtype": "bf16", "timing_method": "cold",
     "rule": "local-regret-clamped",
     "candidates": [{"variant": "cuda_block_online", "config": {"block": 256, ...},
                     "config_key": "block=256,...", "constraints": {"n_max": 8192},
                     "requires": {"min_arch": 80}}, ...],
     "points": [{"m": 1, "n": 1024, "copy_us": 3.6, "times": [4.1, null, ...]}, ...],
     "index": {...},
     "regret": {"geomean": 1.01, "p95": 1.04, "max": 1.09, "method": "leave-one-out"},
     "created_at": "...", "source_runs": [3], "environment": {...}}

``candidates`` and ``points`` are what the fit measured and what its rule (``autotuner/fit/rule.py``)
reads; ``index`` is the rule's answer over the whole domain, written by the fit
(``autotuner/fit/index.py``, which documents how it is built). The lookup reads only ``index``:

- ``views``: ``[{"excluded": [...]}, ...]``: view 0 answers among every candidate; each further view
  among the candidates less ``excluded``, one per set of candidates a GPU model of
  ``autotuner/lookup/gpu_models.py`` runs (a GPU without a table of its own answers from a donor's
  view of the kernels it runs).
- ``answers``: ``[[candidate or null, rule, reason], ...]``, which cells and exact points refer to
  by number; ``rule`` is ``table``, ``model`` or the fallback's (``outside-measured``,
  ``no-candidate``); ``reason`` a text with ``{m}`` and ``{n}`` for the shape.
- ``exact``: per view, ``[[m, n, answer, predicted_us, exact], ...]``: the measured points.
- ``partitions``: per view and N class (0: N % 8 == 0, 1: other N, as the rule keeps them apart), a
  partition of M x N into cells: bands of M (``m_edges``, lower edges), each band's N cells
  (``n_edges`` from ``band_start[b]``, lower edges), and a cell either a leaf or, where the answer
  changes along M inside the band, a short list of M ranges (``split_start``, ``split_m``,
  ``split_leaf``), each a leaf. A leaf holds its answer and its time model: log2 predicted_us =
  c0 + c1 (x - x0) + c2 (y - y0) + c3 (x - x0)(y - y0) with x = log2 M, y = log2 N, NaN: none.
  Arrays are little-endian, zlib-compressed, base64 (``ARRAY_FIELDS`` gives their types): a
  table file is parsed on a process's first lookup, so its size is start-up time.
- ``copy_rate``: elements moved per µs by the copy at its best; a modelled time is at least the
  shape's bytes at that rate (the rule's floor).

A lookup: probe the exact points, bisect into the band, into the cell (and its M range), read.
"""
from __future__ import annotations

import binascii
import sys
import zlib
from array import array
from bisect import bisect_right
from collections import namedtuple
from collections.abc import Mapping
from math import log2

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lookup's import stays light
if TYPE_CHECKING:
    from typing import Any

FORMAT_VERSION = 2
CONVERT_COMMAND = "autotuner convert-tables FILE..."
# partition field -> array type code (q: int64; f: float32, whose 2^-24 relative error moves a predicted
# time by about 1e-6)
ARRAY_FIELDS = {"m_edges": "q", "band_start": "q", "n_edges": "q", "cell_ref": "q", "split_start": "q",
                "split_m": "q", "split_leaf": "q", "leaf_answer": "q", "leaf_model": "f"}
LEAF_MODEL = 6  # x0, y0, c0, c1, c2, c3 per leaf
# the int64 partition arrays a native plan reads, in plan_new's order (each leaf's candidate follows)
PLAN_FIELDS = ("m_edges", "band_start", "n_edges", "cell_ref", "split_start", "split_m", "split_leaf")
_NAN = float("nan")


class TableFormatError(ValueError):
    """A table document that this program cannot read, with what is wrong in it."""


class Pick(namedtuple("Pick", "candidate predicted_us exact")):
    """A table's pick: ``candidate`` (index into its candidates), ``predicted_us`` (or None), ``exact``
    (the shape itself was measured)."""

    __slots__ = ()


def encode_array(values: array) -> str:
    data = array(values.typecode, values)
    if sys.byteorder == "big":
        data.byteswap()
    return binascii.b2a_base64(zlib.compress(data.tobytes(), 9), newline=False).decode("ascii")


def decode_array(text: str, typecode: str) -> array:
    data = array(typecode)
    data.frombytes(zlib.decompress(binascii.a2b_base64(text)))
    if sys.byteorder == "big":
        data.byteswap()
    return data


class _Partition:
    """One view and N class of the index, decoded for lookups: ``m_edges`` (the bands' lower edges)
    and per band ``bands[b]``: (its cells' lower N edges, its cells), a cell being its leaf or, where
    it is split along M, a list [the ranges' lower M edges, their leaves]. A leaf is the tuple
    (answer, candidate, x0, y0, c0, c1, c2, c3), c0 NaN where it has no time (a fallback's included).
    Lists, not arrays: a bisect over a list of ints builds no object per probe, as it must over an
    array; and a lookup reads one tuple where it would index six arrays."""

    __slots__ = ("m_edges", "bands")

    def __init__(self, fields: Mapping[str, str], answers: list[tuple[int | None, str, str]]):
        # built with zip and map where it can: a process's first lookup decodes a partition or two
        arrays = {name: decode_array(fields[name], code).tolist() for name, code in ARRAY_FIELDS.items()}
        candidates = [answer[0] for answer in answers]
        leaf_answer, coefficients = arrays["leaf_answer"], iter(arrays["leaf_model"])
        leaves = list(zip(leaf_answer, map(candidates.__getitem__, leaf_answer), *[coefficients] * LEAF_MODEL))
        if None in candidates:  # a fallback's leaf has no time, whatever its model holds
            leaves = [leaf if leaf[1] is not None else leaf[:4] + (_NAN,) + leaf[5:] for leaf in leaves]
        split_start, split_m, split_leaf = arrays["split_start"], arrays["split_m"], arrays["split_leaf"]
        splits = [[split_m[a:b], [leaves[i] for i in split_leaf[a:b]]] for a, b in zip(split_start, split_start[1:])]
        # cell_ref: a leaf's number, or -(s + 1) for split s, which the reversed splits after the leaves hold
        cells = list(map((leaves + splits[::-1]).__getitem__, arrays["cell_ref"]))
        band_start, n_edges = arrays["band_start"], arrays["n_edges"]
        self.m_edges = arrays["m_edges"]
        self.bands = [(n_edges[a:b], cells[a:b]) for a, b in zip(band_start, band_start[1:])]


def _leaf(partition: _Partition, m: int, n: int) -> tuple:
    """The leaf of (m, n): bisect into the M band, its N cell, and the cell's M range where it has them."""
    n_edges, cells = partition.bands[bisect_right(partition.m_edges, m) - 1]
    leaf = cells[bisect_right(n_edges, n) - 1]
    if type(leaf) is list:  # split along M
        leaf = leaf[1][bisect_right(leaf[0], m) - 1]
    return leaf


class TableFields:
    """A validated table document's fields, as both the lookup's table and the fit's rule
    (``autotuner/fit/rule.py``) read them."""

    def __init__(self, document: Mapping[str, Any]):
        self.document = document
        self.gpu: str = document["gpu"]
        self.dtype: str = document["dtype"]
        self.timing_method: str = document.get("timing_method", "cold")
        self.rule: str = document.get("rule", "nearest-log")
        self.candidates: list[dict[str, Any]] = list(document["candidates"])
        self.points: list[dict[str, Any]] = list(document["points"])
        self.key: tuple[str, str, str] = (self.gpu, self.dtype, self.timing_method)


class DispatchTable(TableFields):
    """A loaded, validated table document and its decision index."""

    def __init__(self, document: Mapping[str, Any]):
        super().__init__(validate(document))
        # (variant, config items) per candidate, as a KernelChoice holds them
        self.choice_fields = [(c["variant"], tuple(c["config"].items())) for c in self.candidates]
        index = document["index"]
        everyone = frozenset(range(len(self.candidates)))
        self.views = {everyone - frozenset(view["excluded"]): number for number, view in enumerate(index["views"])}
        self.answers = [tuple(answer) for answer in index["answers"]]
        self._copy_rate = index.get("copy_rate") or 0.0
        # per view, n -> m -> (answer, predicted_us, exact), as ``locate`` returns it: by N first, as a
        # shape's N is seldom a measured one, and an int's hash costs less than an (m, n) tuple's
        self._exact: list[dict[int, dict[int, tuple[int, float | None, bool]]]] = [{} for _ in index["views"]]
        for by_n, points in zip(self._exact, index["exact"]):
            for m, n, answer, time, exact in points:
                by_n.setdefault(n, {})[m] = (answer, time, exact)
        self._encoded = index["partitions"]
        # per view, per N % 8 != 0: decoded on first use
        self._partitions: list[list[_Partition | None]] = [[None, None] for _ in index["views"]]

    def view_of(self, runnable: frozenset[int] | None) -> int | None:
        """The view answering among ``runnable`` (None: every candidate); None where the index holds
        no view of exactly that set."""
        return 0 if runnable is None else self.views.get(runnable)

    def locate(self, m: int, n: int, view: int = 0) -> tuple[int, float | None, bool]:
        """(answer: an index into ``answers``, predicted_us or None, exact) for (m, n), m >= 1: the
        index's whole work for a shape, without the answer's fields (``answer`` reads them; the
        embedded lookup keeps them per answer, made once)."""
        measured = self._exact[view].get(n)
        if measured is not None and m in measured:
            return measured[m]
        odd = n & 7 != 0
        partition = self._partitions[view][odd] or self._decode(view, odd)
        answer, _, x0, y0, c0, c1, c2, c3 = _leaf(partition, m, n)
        if c0 != c0:  # NaN: the rule gave no time here (or the leaf answers the fallback)
            return answer, None, False
        dx = log2(m) - x0  # m, n >= 1: log2 1 is 0.0, as the fit's model reads it
        dy = log2(n) - y0
        time = 2.0 ** (c0 + c1 * dx + c2 * dy + c3 * dx * dy)
        floor = 2 * m * n / self._copy_rate if self._copy_rate else 0.0
        return answer, time if time > floor else floor, False

    def answer(self, m: int, n: int, view: int = 0) -> tuple[int | None, float | None, bool, str, str]:
        """(candidate or None for the fallback, predicted_us, exact, rule, reason) for (m, n), m >= 1;
        ``reason`` is a fallback's, for this shape (an answer with a candidate has none)."""
        answer, time, exact = self.locate(m, n, view)
        candidate, rule, reason = self.answers[answer]
        return candidate, time, exact, rule, reason.format(m=m, n=n) if reason else ""

    def pick(self, m: int, n: int, view: int = 0) -> int | None:
        """``answer(m, n, view)``'s candidate alone (None: the fallback), m >= 1: the same probe and
        bisects, without the time model and the reason (the runtime's new-shape path needs neither)."""
        measured = self._exact[view].get(n)
        if measured is not None and m in measured:
            return self.answers[measured[m][0]][0]
        odd = n & 7 != 0
        partition = self._partitions[view][odd] or self._decode(view, odd)
        return _leaf(partition, m, n)[1]

    def lookup(self, m: int, n: int) -> Pick | None:
        """The index's pick for (m, n) among every candidate, or None where it answers the fallback."""
        answer, predicted_us, exact = self.locate(max(m, 1), n)
        candidate = self.answers[answer][0]
        return None if candidate is None else Pick(candidate, predicted_us, exact)

    def native_index(self, view: int = 0) -> tuple[bytes, tuple[tuple[bytes, ...], ...]]:
        """``view``'s index as the native module's plans take it (``plan_new``, ``kernels/native``): the
        measured points as int64 (n, m, candidate) triples, and per N class the partition's int64
        arrays (``PLAN_FIELDS``, then each leaf's candidate), candidates -1 for the fallback. The
        same arrays this class bisects, so the two picks agree exactly (a test holds them to it)."""
        candidates = [-1 if answer[0] is None else answer[0] for answer in self.answers]
        exact = array("q")
        for n, by_m in self._exact[view].items():
            for m, (answer, _, _) in by_m.items():
                exact.extend((n, m, candidates[answer]))
        partitions = []
        for fields in self._encoded[view]:
            arrays = [decode_array(fields[name], ARRAY_FIELDS[name]) for name in PLAN_FIELDS]
            arrays.append(array("q", map(candidates.__getitem__, decode_array(fields["leaf_answer"], "q"))))
            partitions.append(tuple(values.tobytes() for values in arrays))  # native byte order, as C reads them
        return exact.tobytes(), tuple(partitions)

    def _decode(self, view: int, odd: bool) -> _Partition:
        partition = self._partitions[view][odd] = _Partition(self._encoded[view][odd], self.answers)
        return partition


def validate(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check a table document's shape; raise :class:`TableFormatError` naming the first problem (an
    older format names the command that converts it)."""
    if not isinstance(document, Mapping):
        raise TableFormatError("a dispatch table must be a JSON object")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        hint = f"; `{CONVERT_COMMAND}` converts it" if version == 1 else ""
        raise TableFormatError(f"table format_version {version!r} is not supported (this program reads "
                               f"{FORMAT_VERSION}){hint}")
    for field in ("gpu", "dtype", "candidates", "points", "index"):
        if field not in document:
            raise TableFormatError(f"table lacks the field {field!r}")
    for candidate in document["candidates"]:
        if not isinstance(candidate, Mapping) or "variant" not in candidate or "config" not in candidate:
            raise TableFormatError("every candidate needs 'variant' and 'config'")
        if not isinstance(candidate["config"], Mapping):
            raise TableFormatError(f"candidate {candidate['variant']!r}: 'config' must be an object")
    index = document["index"]
    if not isinstance(index, Mapping):
        raise TableFormatError("table 'index' must be an object")
    for field in ("views", "answers", "exact", "partitions"):
        if field not in index:
            raise TableFormatError(f"table index lacks the field {field!r}")
    views = len(index["views"])
    if len(index["exact"]) != views or len(index["partitions"]) != views or not views:
        raise TableFormatError(f"table index has {views} views but {len(index['exact'])} exact lists and "
                               f"{len(index['partitions'])} partition pairs")
    count = len(document["candidates"])
    if any(answer[0] is not None and not 0 <= answer[0] < count for answer in index["answers"]) or any(
            not 0 <= excluded < count for view in index["views"] for excluded in view["excluded"]):
        raise TableFormatError(f"table index names a candidate outside its {count} candidates: the index is not "
                               f"this table's (`{CONVERT_COMMAND}` rebuilds it)")
    for pair in index["partitions"]:
        if len(pair) != 2 or any(set(ARRAY_FIELDS) - set(part) for part in pair):
            raise TableFormatError(f"every index partition needs the arrays {sorted(ARRAY_FIELDS)}, one per N class")
    return document
