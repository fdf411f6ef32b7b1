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

A lookup answers a measured point as measured; any other shape, by a bisect into the band, into the
cell (and its M range), and the leaf's time model. The lookup decodes a partition on its first use
into ``_Partition``'s form (each measured point a cell of its own, each leaf's time model expanded
in x and y, octave slices that shorten the bisects); ``native_index`` hands the native module the
arrays of this format as they are.
"""
from __future__ import annotations

import binascii
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections import namedtuple
from collections.abc import Mapping, Sequence
from math import log2

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lookup's import stays light
if TYPE_CHECKING:
    from typing import Any, Callable

FORMAT_VERSION = 2
CONVERT_COMMAND = "autotuner convert-tables FILE..."
# partition field -> array type code (q: int64; f: float32, whose 2^-24 relative error moves a predicted
# time by about 1e-6)
ARRAY_FIELDS = {"m_edges": "q", "band_start": "q", "n_edges": "q", "cell_ref": "q", "split_start": "q",
                "split_m": "q", "split_leaf": "q", "leaf_answer": "q", "leaf_model": "f"}
LEAF_MODEL = 6  # x0, y0, c0, c1, c2, c3 per leaf
OCTAVES = 64  # bit lengths a decoded partition's octave slices cover: any M or N below 2**64
SMALL_M = 1024  # an M below it finds its band by index: no bisect where the bands are densest (measured rows)
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
    """One view and N class of the index, decoded for lookups (``DispatchTable.locate`` walks it):

    - ``m_edges``: the bands' lower M edges (the first 1); ``m_octaves[k]``: the slice (lo, hi) of them
      that a bisect for an M of bit length k searches (``_octave_slices``); ``small_m_bands[m]``: the
      band of an M below ``SMALL_M``, read by index;
    - ``bands[b]``: (its cells' lower N edges, their octave slices, its cells), a cell being a leaf or,
      where it is split along M, a list [the ranges' lower M edges, their leaves];
    - a leaf: the tuple (answer, candidate, a, b, c, d), its time model expanded once here from the
      table's c0 + c1 (x - x0) + c2 (y - y0) + c3 (x - x0)(y - y0) to log2 predicted_us =
      a + b x + (c + d x) y (x = log2 M, y = log2 N): no offsets to take per lookup, and the same
      time to within 2e-11 relative over the shipped tables' leaves (the double rounding of terms of
      up to 3e5); a NaN: no time (a fallback's leaf included);
    - each measured point (m, n) of the view and class (``_carve``): a cell [n, n + 1) of its own,
      split along M with the range [m, m + 1) holding the leaf (answer, candidate, (answer,
      predicted_us, exact)), the last the 3-tuple ``locate`` returns, as measured. A new shape's
      lookup then probes no measured points apart, and only a split cell's tells the two kinds of
      leaf apart (by their length).

    Lists, not arrays: a bisect over a list of ints builds no object per probe, as it must over an
    array; and a lookup reads one tuple where it would index six arrays. One int object per distinct
    edge value (the bands repeat most of their edges): a lookup's comparisons read a few thousand
    ints that stay in the CPU's caches, not one of tens of thousands."""

    __slots__ = ("m_edges", "m_octaves", "bands", "small_m_bands")

    def __init__(self, fields: Mapping[str, str], answers: list[tuple[int | None, str, str]],
                 measured: list[tuple[int, int, tuple[int, float | None, bool]]]):
        # built with zip and map where it can: a process's first lookup decodes a partition or two
        arrays = {name: decode_array(fields[name], code).tolist() for name, code in ARRAY_FIELDS.items()
                  if name != "leaf_model"}
        candidates = [answer[0] for answer in answers]
        leaves = _expanded_leaves(arrays["leaf_answer"], decode_array(fields["leaf_model"], "f"), candidates)
        edge = {}.setdefault  # one int object per edge value
        split_start, split_m, split_leaf = arrays["split_start"], arrays["split_m"], arrays["split_leaf"]
        split_m = list(map(edge, split_m, split_m))
        splits = [[split_m[a:b], [leaves[i] for i in split_leaf[a:b]]] for a, b in zip(split_start, split_start[1:])]
        # cell_ref: a leaf's number, or -(s + 1) for split s, which the reversed splits after the leaves hold
        cells = list(map((leaves + splits[::-1]).__getitem__, arrays["cell_ref"]))
        band_start, n_edges, m_edges = arrays["band_start"], arrays["n_edges"], arrays["m_edges"]
        n_edges = list(map(edge, n_edges, n_edges))
        self.m_edges = m_edges = list(map(edge, m_edges, m_edges))
        ranges = list(zip(band_start, band_start[1:]))
        band_edges = [n_edges[a:b] for a, b in ranges]
        band_cells = [cells[a:b] for a, b in ranges]
        for m, n, result in measured:
            band = bisect_right(m_edges, m) - 1
            m_hi = m_edges[band + 1] if band + 1 < len(m_edges) else None
            _carve(band_edges[band], band_cells[band], m_edges[band], m_hi, edge(m, m), edge(n, n),
                   (result[0], candidates[result[0]], result))
        slices = {}.setdefault  # one (lo, hi) tuple per distinct slice
        self.m_octaves = _octave_slices(m_edges, slices)
        self.bands = [(edges, _octave_slices(edges, slices), cells) for edges, cells in zip(band_edges, band_cells)]
        self.small_m_bands = small = [None] * SMALL_M  # m_edges[0] is 1: M = 0 has no band
        for band, lo, hi in zip(self.bands, m_edges, [*m_edges[1:], SMALL_M]):
            if lo >= SMALL_M:
                break
            small[lo:min(hi, SMALL_M)] = [band] * (min(hi, SMALL_M) - lo)


def _expanded_leaves(leaf_answer: list[int], leaf_model: Sequence[float], candidates: list[int | None]) -> list[tuple]:
    """The leaves as ``_Partition`` holds them: each (x0, y0, c0, c1, c2, c3) of ``leaf_model`` expanded to
    (a, b, c, d); a NaN where c0 is NaN or where the leaf answers the fallback (no time)."""
    x0s, y0s, c0s, c1s, c2s, c3s = (leaf_model[k::LEAF_MODEL] for k in range(LEAF_MODEL))
    leaves = [(answer, candidates[answer], c0 - c1 * x0 - c2 * y0 + c3 * x0 * y0, c1 - c3 * y0, c2 - c3 * x0, c3)
              for answer, x0, y0, c0, c1, c2, c3 in zip(leaf_answer, x0s, y0s, c0s, c1s, c2s, c3s)]
    if None in candidates:  # a fallback's leaf has no time, whatever its model holds
        leaves = [leaf if leaf[1] is not None else (leaf[0], None, _NAN, 0.0, 0.0, 0.0) for leaf in leaves]
    return leaves


def _isolate(edges: list[int], items: list, value: int, upper: int | None) -> int:
    """Cut the piece holding ``value`` (``edges``: sorted lower edges, each item over [its edge, the
    next edge or ``upper``), None: no upper edge; both changed in place) at ``value`` and ``value + 1``,
    each side keeping the piece's item, so that [value, value + 1) is a piece of its own; its index."""
    i = bisect_right(edges, value) - 1
    item = items[i]
    if edges[i] < value:
        i += 1
        edges.insert(i, value)
        items.insert(i, item)
    end = edges[i + 1] if i + 1 < len(edges) else upper
    if end is None or end > value + 1:
        edges.insert(i + 1, value + 1)
        items.insert(i + 1, item)
    return i


def _carve(n_edges: list[int], cells: list, m_lo: int, m_hi: int | None, m: int, n: int, point: tuple) -> None:
    """Give the measured point (m, n) its own cell in a band ([m_lo, m_hi), m_hi None: no upper edge; its
    N edges and cells, changed in place): the cell holding n is cut at n and n + 1, and the piece
    [n, n + 1) split along M with ``point`` over [m, m + 1) and the piece's former leaves around it."""
    i = _isolate(n_edges, cells, n, None)
    cell = cells[i]  # a split cell is copied: the pieces beside it still hold the original
    m_edges, leaves = (list(cell[0]), list(cell[1])) if type(cell) is list else ([m_lo], [cell])
    leaves[_isolate(m_edges, leaves, m, m_hi)] = point
    cells[i] = [m_edges, leaves]


def _octave_slices(edges: list[int], slices: Callable[[tuple, tuple], tuple]) -> list[tuple[int, int]]:
    """Per bit length k < ``OCTAVES`` (a value v with 2**(k - 1) <= v < 2**k), the slice (lo, hi) of
    ``edges`` (sorted lower edges, the first 1) in which ``bisect_right(edges, v, lo, hi)`` is
    ``bisect_right(edges, v)``: every edge before lo is below 2**(k - 1) <= v, every edge from hi on at
    least 2**k > v. A bisect then compares v with the few edges of its octave, not with log2(len(edges))
    edges of the whole list. ``slices`` keeps one tuple per distinct slice."""
    top = edges[-1].bit_length() + 1  # from there on, every edge is below v
    below = [bisect_left(edges, 1 << k) for k in range(top)]  # below[k]: the edges under 2**k
    past = (len(edges), len(edges))
    return [(0, 0), *map(slices, zip(below, below[1:]), zip(below, below[1:]))] + \
        [slices(past, past)] * (OCTAVES - top)


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
        copy_rate = index.get("copy_rate") or 0.0
        # the rule's floor on a modelled time, 2 m n / copy_rate (the shape's elements read and written at
        # the copy's best rate), as log2 m + log2 n + this; -inf: no floor
        self._log2_floor = log2(2.0 / copy_rate) if copy_rate else -float("inf")
        # per view, n -> m -> (answer, predicted_us, exact), as ``locate`` returns it: what the decoded
        # partitions' measured cells hold, and ``locate``'s answer while a partition is not yet decoded
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
        embedded lookup keeps them per answer, made once). The one walk of a decoded partition: the M
        band (by index for an M below ``SMALL_M``, else a bisect over the slice of M's octave), its N
        cell (a bisect over the slice of N's octave), the cell's M range where it has them; then the
        leaf's time model (one function, no calls of its own: this is a new shape's lookup)."""
        partition = self._partitions[view][1 if n & 7 else 0]
        if partition is None:  # not decoded yet: a measured point answers without decoding it
            measured = self._exact[view].get(n)
            if measured is not None and m in measured:
                return measured[m]
            partition = self._decode(view, 1 if n & 7 else 0)
        if m < SMALL_M:
            n_edges, n_octaves, cells = partition.small_m_bands[m]
        else:
            lo, hi = partition.m_octaves[m.bit_length()]
            n_edges, n_octaves, cells = partition.bands[bisect_right(partition.m_edges, m, lo, hi) - 1]
        lo, hi = n_octaves[n.bit_length()]
        leaf = cells[bisect_right(n_edges, n, lo, hi) - 1]
        if type(leaf) is list:  # split along M (or a measured point's cell)
            leaf = leaf[1][bisect_right(leaf[0], m) - 1]
            if len(leaf) == 3:  # a measured point: as measured
                return leaf[2]
        answer, _, a, b, c, d = leaf
        if a != a:  # NaN: the rule gave no time here (or the leaf answers the fallback)
            return answer, None, False
        x = log2(m)  # m, n >= 1: log2 1 is 0.0, as the fit's model reads it
        y = log2(n)
        time = a + b * x + (c + d * x) * y
        floor = x + y + self._log2_floor  # the rule's floor, 2 m n / copy_rate, in log2
        return answer, 2.0 ** (time if time > floor else floor), False

    def answer(self, m: int, n: int, view: int = 0) -> tuple[int | None, float | None, bool, str, str]:
        """(candidate or None for the fallback, predicted_us, exact, rule, reason) for (m, n), m >= 1;
        ``reason`` is a fallback's, for this shape (an answer with a candidate has none)."""
        answer, time, exact = self.locate(m, n, view)
        candidate, rule, reason = self.answers[answer]
        return candidate, time, exact, rule, reason.format(m=m, n=n) if reason else ""

    def pick(self, m: int, n: int, view: int = 0) -> int | None:
        """``answer(m, n, view)``'s candidate alone (None: the fallback), m >= 1."""
        return self.answers[self.locate(m, n, view)[0]][0]

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

    def _decode(self, view: int, odd: int) -> _Partition:
        measured = [(m, n, result) for n, by_m in self._exact[view].items() if (1 if n & 7 else 0) == odd
                    for m, result in by_m.items()]
        partition = self._partitions[view][odd] = _Partition(self._encoded[view][odd], self.answers, measured)
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
