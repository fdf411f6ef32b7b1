"""CPU tests of the bench's bookkeeping (the timing itself needs a GPU: test_bench_gpu.py)."""
from __future__ import annotations

import csv

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
