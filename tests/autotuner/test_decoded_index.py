"""The lookup's decoded index (``_Partition`` in autotuner/lookup/table.py: octave slices, small Ms'
bands by index, time models expanded in x and y, a cell of its own per measured point) answers as the
table format reads plainly: the measured points first, then a bisect into the band, the cell and its
M range, and the leaf's time model c0 + c1 (x - x0) + c2 (y - y0) + c3 (x - x0)(y - y0), at least
2 m n / copy_rate."""
from __future__ import annotations

import json
import math
import random
from bisect import bisect_right
from pathlib import Path

import pytest

from autotuner.domain import MAX_DIM
from autotuner.lookup.table import ARRAY_FIELDS, LEAF_MODEL, SMALL_M, DispatchTable, decode_array

SHIPPED = Path(__file__).resolve().parents[2] / "autotuner" / "tables"


class PlainIndex:
    """One view of a table document's index, read as its format describes it (no shortcuts)."""

    def __init__(self, document: dict, view: int):
        index = document["index"]
        self.answers = index["answers"]
        self.copy_rate = index.get("copy_rate") or 0.0
        self.exact = {(m, n): (answer, time, exact) for m, n, answer, time, exact in index["exact"][view]}
        self.partitions = [{name: decode_array(fields[name], code).tolist() for name, code in ARRAY_FIELDS.items()}
                           for fields in index["partitions"][view]]

    def locate(self, m: int, n: int) -> tuple[int, float | None, bool]:
        if (m, n) in self.exact:
            return self.exact[(m, n)]
        part = self.partitions[n % 8 != 0]
        band = bisect_right(part["m_edges"], m) - 1
        first, stop = part["band_start"][band], part["band_start"][band + 1]
        cell = first + bisect_right(part["n_edges"][first:stop], n) - 1
        ref = part["cell_ref"][cell]
        if ref >= 0:
            leaf = ref
        else:
            lo, hi = part["split_start"][-ref - 1], part["split_start"][-ref]
            leaf = part["split_leaf"][lo + bisect_right(part["split_m"][lo:hi], m) - 1]
        answer = part["leaf_answer"][leaf]
        x0, y0, c0, c1, c2, c3 = part["leaf_model"][LEAF_MODEL * leaf:LEAF_MODEL * (leaf + 1)]
        if self.answers[answer][0] is None or math.isnan(c0):
            return answer, None, False
        dx, dy = math.log2(m) - x0, math.log2(n) - y0
        time = 2.0 ** (c0 + c1 * dx + c2 * dy + c3 * dx * dy)
        return answer, max(time, 2 * m * n / self.copy_rate if self.copy_rate else 0.0), False


def _shapes(document: dict, view: int) -> list[tuple[int, int]]:
    """The measured points and their neighbours, the bands' and some cells' edges and their neighbours,
    the domain's corners, every M up to SMALL_M + 100 (its band read by index below SMALL_M) and
    20,000 log-uniform shapes."""
    rng = random.Random(5)
    near = [(m + dm, n + dn) for m, n, *_ in document["index"]["exact"][view] for dm in (-1, 0, 1) for dn in (-1, 0, 1)]
    for fields in document["index"]["partitions"][view]:
        m_edges, n_edges = decode_array(fields["m_edges"], "q").tolist(), decode_array(fields["n_edges"], "q").tolist()
        near += [(m + dm, n + dn) for m in m_edges for n in rng.sample(n_edges, 20) for dm in (-1, 0) for dn in (-1, 0)]
    corners = [(m, n) for m in (1, MAX_DIM) for n in (1, 7, 8, MAX_DIM - 7, MAX_DIM)]
    small = [(m, max(1, int(2 ** rng.uniform(0, 31)))) for m in range(1, SMALL_M + 100)]
    logs = [(max(1, int(2 ** rng.uniform(0, 31))), max(1, int(2 ** rng.uniform(0, 31)))) for _ in range(20_000)]
    return [(m, n) for m, n in near + corners + small + logs if 1 <= m <= MAX_DIM and 1 <= n <= MAX_DIM]


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("h100_*.json")) + [SHIPPED / "l4_fp32_cold.json"],
                         ids=lambda path: path.stem)
def test_the_decoded_index_answers_as_the_format_reads_plainly(path):
    document = json.loads(path.read_text())
    table = DispatchTable(document)
    for view in range(len(document["index"]["views"])):
        plain = PlainIndex(document, view)
        for odd in (0, 1):  # decoded first: the measured points answer from their own cells
            table._decode(view, odd)
        for m, n in _shapes(document, view):
            got, want = table.locate(m, n, view), plain.locate(m, n)
            assert got[0] == want[0] and got[2] is want[2], (view, m, n, got, want)
            assert (got[1] is None) == (want[1] is None), (view, m, n, got, want)
            assert got[1] is None or got[1] == pytest.approx(want[1], rel=1e-9, abs=0), (view, m, n, got, want)
            assert table.pick(m, n, view) == plain.answers[want[0]][0], (view, m, n)


def test_a_measured_point_answers_alike_before_and_after_its_partition_is_decoded():
    document = json.loads((SHIPPED / "h100_bf16_cold.json").read_text())
    points = [(m, n) for m, n, *_ in document["index"]["exact"][0]]
    fresh, decoded = DispatchTable(document), DispatchTable(document)
    for odd in (0, 1):
        decoded._decode(0, odd)
    for m, n in points:
        before = fresh.locate(m, n)  # the measured points' dict: nothing decoded
        assert fresh._partitions[0] == [None, None]
        assert decoded.locate(m, n) == before and decoded.pick(m, n) == fresh.pick(m, n), (m, n)


def test_a_measured_point_inside_a_wider_band_gets_its_own_range_of_its_own_cell():
    """The fit gives every measured M a band of its own, but ``_carve`` does not count on it: a point
    inside a band [1, 10) and a cell [64, 200) split at M = 6 leaves the rest of the band as it was."""
    from autotuner.lookup.table import _carve

    low, high, point = ("low",), ("high",), ("point",)
    n_edges, cells = [1, 64, 200], ["below", [[1, 6], [low, high]], "above"]
    _carve(n_edges, cells, 1, 10, 4, 100, point)
    assert n_edges == [1, 64, 100, 101, 200]
    assert cells[:2] == ["below", [[1, 6], [low, high]]] and cells[3:] == [[[1, 6], [low, high]], "above"]
    assert cells[2] == [[1, 4, 5, 6], [low, point, low, high]]
    _carve(n_edges, cells, 1, 10, 9, 100, point)  # a second point of the same cell, at the band's top
    assert cells[2] == [[1, 4, 5, 6, 9], [low, point, low, high, point]]
    edges, leaves = [1, 100], ["low", "high"]
    _carve(edges, leaves, 1, None, 1, 1, point)  # the domain's corner, in the last band
    assert edges == [1, 2, 100] and leaves == [[[1, 2], [point, "low"]], "low", "high"]
