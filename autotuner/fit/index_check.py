"""Whether a table's decision index answers as its fit's rule does (``autotuner/fit/index.py``
builds it): at the centre of every leaf, the shape its answer was taken at, and at every measured
point, in every view. ``tests/autotuner/test_index.py`` runs it on the committed tables."""
from __future__ import annotations

from array import array
from typing import Any, Mapping

from autotuner.domain import MAX_DIM
from autotuner.fit import model as scaling
from autotuner.fit.index import _class_mid, _class_values, _mid
from autotuner.fit.rule import RuleTable
from autotuner.lookup.table import ARRAY_FIELDS, DispatchTable, decode_array


def index_mismatches(document: Mapping[str, Any]) -> list[str]:
    """Where a format-2 document's index does not answer as the rule does: at the centre of every
    leaf (the shape its answer was taken at) and at every measured point, in every view. [] if none."""
    table = DispatchTable(document)
    rule = RuleTable({**document, "format_version": 1})
    measured = {(p["m"], p["n"]) for p in rule.points}
    everyone = frozenset(range(len(rule.candidates)))
    found = []
    for view, usable in enumerate(everyone - frozenset(v["excluded"]) for v in document["index"]["views"]):
        allowed = None if usable == everyone else usable
        shapes = set(measured)
        for cls, encoded in enumerate(document["index"]["partitions"][view]):
            arrays = {name: decode_array(encoded[name], code) for name, code in ARRAY_FIELDS.items()}
            for m_lo, m_hi, n_lo, n_hi in _leaf_boxes(arrays):
                values = _class_values(n_lo, n_hi, cls)
                if values is not None:
                    shapes.add((_mid(m_lo, m_hi - 1), _class_mid(*values, cls)))
        for m, n in sorted(shapes):
            got = table.answer(m, n, view)
            want = scaling.answer_fields(rule, m, n, allowed)
            if (got[0], got[2], got[3], got[4]) != (want[0], want[2], want[3], want[4]) or (
                    (m, n) in measured and got[1] != want[1]):
                found.append(f"view {view} ({m}, {n}): index {got[:4]}, rule {want[:4]}")
    return found


def _leaf_boxes(arrays: Mapping[str, array]) -> list[tuple[int, int, int, int]]:
    """(m_lo, m_hi, n_lo, n_hi) of every leaf of one decoded partition, upper edges exclusive."""
    boxes = []
    m_edges, band_start, n_edges = arrays["m_edges"], arrays["band_start"], arrays["n_edges"]
    for band, m_lo in enumerate(m_edges):
        m_hi = m_edges[band + 1] if band + 1 < len(m_edges) else MAX_DIM + 1
        start, stop = band_start[band], band_start[band + 1]
        for cell in range(start, stop):
            n_lo, n_hi = n_edges[cell], n_edges[cell + 1] if cell + 1 < stop else MAX_DIM + 1
            ref = arrays["cell_ref"][cell]
            if ref >= 0:
                boxes.append((m_lo, m_hi, n_lo, n_hi))
                continue
            split = -ref - 1
            lo, hi = arrays["split_start"][split], (arrays["split_start"][split + 1]
                                                    if split + 1 < len(arrays["split_start"]) else len(arrays["split_m"]))
            bounds = [*arrays["split_m"][lo:hi], m_hi]
            boxes.extend((bounds[k], bounds[k + 1], n_lo, n_hi) for k in range(hi - lo))
    return boxes
