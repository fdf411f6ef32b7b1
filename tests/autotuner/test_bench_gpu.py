"""``autotuner bench`` on the GPU: rounds on fresh buffers, medians for kernels, fastest copy."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_bench_rows_hold_a_time_for_the_copy_the_dispatch_and_torch(monkeypatch):
    from autotuner.report import benchrun

    calls = []
    real_round = benchrun._round

    def counting_round(timer, m, n, dtype, peers, shift):
        times = real_round(timer, m, n, dtype, peers, shift)
        calls.append((m, n, dtype, shift, times))
        return times

    monkeypatch.setattr(benchrun, "_round", counting_round)
    rows = benchrun.bench_shapes([(4, 1000, "fp32"), (1, 32000, "bf16")], rounds=3)
    assert [(r["m"], r["n"], r["dtype"]) for r in rows] == [(4, 1000, "fp32"), (1, 32000, "bf16")]
    assert [c[3] for c in calls] == [0, 1, 2, 0, 1, 2]
    for row in rows:
        rounds = [c[4] for c in calls if (c[0], c[1], c[2]) == (row["m"], row["n"], row["dtype"])]
        assert row["copy_us"] == min(r["copy"] for r in rounds) > 0
        assert row["dispatched_us"] == sorted(r["dispatched"] for r in rounds)[1]
        assert isinstance(row["torch_us"], float) and row["torch_us"] > 0
    summary = benchrun.summarize(rows)
    assert summary["shapes"] == 2 and 0 < summary["min"] <= summary["geomean"]


def test_graph_launch_bench_times_every_contender_through_a_graph_replay(monkeypatch):
    """--graph-launch: the timer captures each call once and times replays of it between the flush
    and the events; the dispatched softmax and torch both get a time, and the graph is replayed."""
    import torch

    from autotuner.report import benchrun

    replays = []
    real_replay = torch.cuda.CUDAGraph.replay

    def counting_replay(self):
        replays.append(self)
        return real_replay(self)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counting_replay)
    rows = benchrun.bench_shapes([(4, 1000, "fp16")], rounds=1, graph_launch=True)
    assert rows[0]["dispatched_us"] > 0 and isinstance(rows[0]["torch_us"], float) and rows[0]["copy_us"] > 0
    assert len(replays) >= 3 * 20  # copy (2 kinds), dispatched, torch: at least two batches of 10 each
