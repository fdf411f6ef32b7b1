"""CPU tests of the bench's bookkeeping (the timing itself needs a GPU: test_bench_gpu.py)."""
from __future__ import annotations

import csv

import pytest

from autotuner.report.benchrun import summarize, write_csv


def _row(n: int, dispatched: float, torch_us: float) -> dict:
    return {"dtype": "fp16", "m": 4, "n": n, "copy_us": 10.0, "dispatched_us": dispatched,
            "dispatched": "cuda_x[a=1]", "torch_us": torch_us, "quack_us": "ERR:ValueError", "liger_us": None}


def test_write_csv_replaces_the_file_with_the_rows_so_far(tmp_path):
    write_csv([_row(1000, 12.0, 13.0)], tmp_path)
    path = write_csv([_row(1000, 12.0, 13.0), _row(2000, 20.0, 19.0)], tmp_path)
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["n"] for r in rows] == ["1000", "2000"]
    assert rows[0]["quack_us"] == "ERR:ValueError"
    assert not (tmp_path / "bench.csv.tmp").exists()


def test_summarize_counts_shapes_within_three_percent_of_the_best_peer():
    figures = summarize([_row(1000, 12.0, 13.0), _row(2000, 20.0, 19.0)])
    assert figures["within_3pct_of_best_peer"] == "1/2"  # 20.0 > 19.0 * 1.03
    assert figures["min"] == 0.5


def test_summarize_gives_issue_30s_bounds_torch_on_a_megabyte_and_few_long_rows():
    rows = [_row(1000, 12.0, 13.0),  # 8 KB: over 1.05x torch would not count
            {**_row(2**20, 1100.0, 1000.0), "copy_us": 700.0},  # 8 MB at 1.10x torch; M 4, N 2^20: 0.636 of copy
            {**_row(2**17, 50.0, 52.0), "m": 64, "copy_us": 45.0}]  # 16 MB, under torch; M 64: not few rows
    figures = summarize(rows)
    assert figures["over_1.05x_torch_at_1mb_or_more"] == 1
    assert figures["few_long_rows_min"] == 700.0 / 1100.0
    assert figures["vs_torch_geomean"] == pytest.approx((12 / 13 * 1.1 * 50 / 52) ** (1 / 3))
    assert summarize([_row(1000, 12.0, "ERR:X")])["vs_torch_geomean"] is None
