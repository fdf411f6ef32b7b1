"""Which stored rows `sweep --retime-unstable` measures again (autotuner.tune.retime), on plain rows."""
from __future__ import annotations

from autotuner.tune.retime import SLOWER_THAN_LARGER, retime_keys


def row(cid, m, n, median, p20=None, p80=None, status="ok", dtype="bf16"):
    p20 = median if p20 is None else p20
    p80 = median * 1.05 if p80 is None and median is not None else p80
    return (cid, m, n, dtype, status, median, p20, p80)


def test_steady_rows_that_grow_with_the_shape_are_kept():
    rows = [row(1, 1, 1024, 4.0), row(1, 1, 4096, 4.5), row(1, 4, 4096, 5.0), row(1, 4096, 4096, 40.0)]
    assert retime_keys(rows, 2.0) == set()


def test_a_wide_spread_is_retimed():
    rows = [row(1, 1, 1024, 4.0, p20=3.9, p80=9.0), row(1, 1, 4096, 4.5)]
    assert retime_keys(rows, 2.0) == {(1, 1, 1024, "bf16")}


def test_a_row_far_slower_than_a_larger_shape_of_the_same_candidate_is_retimed():
    # the H100 case: a steady-looking 331 us quick row where the kernel takes ~7 us at larger shapes
    rows = [row(7, 1, 131072, 331.0, p20=297.0, p80=366.0), row(7, 1, 151936, 7.6), row(7, 4, 131072, 8.1),
            row(8, 1, 131072, 7.5)]  # another candidate's row on that shape does not count
    assert retime_keys(rows, 2.0) == {(7, 1, 131072, "bf16")}


def test_the_factor_leaves_alignment_and_wave_effects_alone():
    rows = [row(1, 1, 50257, (SLOWER_THAN_LARGER - 0.5) * 5.0), row(1, 1, 65536, 5.0)]
    assert retime_keys(rows, 2.0) == set()


def test_a_later_steady_row_settles_the_key_and_failures_are_never_retimed():
    rows = [row(1, 1, 1024, 40.0, p20=4.0, p80=50.0), row(1, 1, 1024, 4.1),  # retimed already
            row(2, 1, 1024, None, status="wrong"), row(2, 1, 1024, 50.0, p20=5.0, p80=60.0)]
    assert retime_keys(rows, 2.0) == set()


def test_dtypes_are_separate_series():
    rows = [row(1, 1, 1024, 9.0, dtype="fp32"), row(1, 4, 4096, 2.0, dtype="bf16")]
    assert retime_keys(rows, 2.0) == set()
