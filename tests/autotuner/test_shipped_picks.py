"""The shipped tables answer the same picks as the committed snapshot on a fixed 10,000-shape sample
(every dtype, both GPUs): a restructuring or a lookup change that moves a pick fails here."""
from __future__ import annotations

from tests.autotuner.shipped_picks import DTYPES, GPUS, SHAPES, current_picks, load_snapshot, sample_shapes


def test_sample_covers_the_stated_domain():
    shapes = sample_shapes()
    assert len(shapes) == SHAPES
    assert min(m for m, _ in shapes) == 0 and max(m for m, _ in shapes) > 1 << 18
    assert min(n for _, n in shapes) == 1 and max(n for _, n in shapes) > 1 << 22
    assert sample_shapes() == shapes  # a fixed seed gives the same sample


def test_shipped_tables_answer_the_snapshot_picks():
    snapshot, now = load_snapshot(), current_picks()
    assert len({name for column in snapshot.values() for name in column}) > 10  # many kernels, not one fallback
    assert sorted(snapshot) == sorted(now) == sorted(f"{g}/{d}" for g in GPUS for d in DTYPES)
    shapes = sample_shapes()
    for key in snapshot:
        moved = [(shapes[i], was, now[key][i]) for i, was in enumerate(snapshot[key]) if now[key][i] != was]
        assert not moved, f"{key}: {len(moved)} picks moved, first: {moved[:3]}"
