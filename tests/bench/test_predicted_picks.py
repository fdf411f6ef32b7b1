"""The predicted-picks bench's CPU parts: its shapes, the tables whose picks it times, its summary."""
from __future__ import annotations

import csv

from autotuner.lookup.gpu_models import GPU_MODELS, runs_on
from bench.probes import predicted_picks
from kernels import KernelConfig, get_variant


def test_shapes_are_seeded_log_uniform_and_at_most_256_mb_in_fp32():
    shapes = predicted_picks.random_shapes(300, seed=7)
    assert shapes == predicted_picks.random_shapes(300, seed=7) != predicted_picks.random_shapes(300, seed=8)
    assert all(1 <= m <= 2**20 and 1 <= n <= 2**24 and m * n * 4 <= 256 * 2**20 for m, n in shapes)
    assert sum(m < 32 for m, _ in shapes) > 30 and sum(m > 32768 for m, _ in shapes) > 10  # the whole M range
    assert sum(n < 64 for _, n in shapes) > 30 and sum(n > 2**18 for _, n in shapes) > 20  # the size cap thins long rows


def test_the_copied_table_offers_the_h100_only_kernels_it_runs_and_differs_from_its_own(tmp_path):
    stores = predicted_picks.tables("h100", ["measured", "copied", "torch"], tmp_path / "x.csv", None)
    differ = 0
    for m, n in predicted_picks.random_shapes(150, seed=1):
        own = predicted_picks.pick(stores["measured"], m, n, "bf16", "h100")
        copied = predicted_picks.pick(stores["copied"], m, n, "bf16", "h100")
        assert predicted_picks.pick(stores["torch"], m, n, "bf16", "h100") == ("torch_softmax", {})
        variant = get_variant(copied[0])
        assert runs_on(variant.requirements(KernelConfig.from_dict(copied[1]), "bf16"), GPU_MODELS["h100"])
        differ += own != copied
    assert differ > 0  # the H200's table is not the H100's


def test_summary_divides_each_label_by_the_measured_pick(tmp_path):
    path = tmp_path / "bench.csv"
    rows = [{"dtype": "bf16", "m": 1, "n": 2, "copy_us": 5.0, "measured_us": 10.0, "predicted_us": 11.0, "torch_us": 20.0},
            {"dtype": "bf16", "m": 3, "n": 4, "copy_us": 5.0, "measured_us": 10.0, "predicted_us": "WRONG", "torch_us": 40.0}]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = predicted_picks.summarize([path])
    assert summary["shapes"] == 2
    assert summary["predicted"]["vs_measured_geomean"] == 1.1 and summary["predicted"]["shapes"] == 1
    assert abs(summary["torch"]["vs_measured_geomean"] - (2 * 4) ** 0.5) < 1e-3
    assert summary["measured"]["of_copy_geomean"] == 0.5


def test_a_shape_times_each_distinct_pick_once_per_round_and_reports_failures(monkeypatch):
    """``time_shape`` with the GPU parts replaced: picks that coincide are timed once and share the
    time; a pick that fails to build is reported in its column, the others still timed."""
    import torch

    from autotuner.tune import measure
    from bench.probes import pick_pairs
    from kernels import reference

    built = []

    def fake_launch(choice, dtype, n):
        built.append(choice["variant"])
        if choice["variant"] == "broken":
            raise RuntimeError("no such kernel here")
        return choice["variant"]

    speeds = {"fast": 10.0, "slow": 30.0}
    monkeypatch.setattr(pick_pairs, "_launch", fake_launch)
    monkeypatch.setattr(pick_pairs, "_timed", lambda timer, x, dtype, launch: speeds[launch])
    monkeypatch.setattr(measure, "copy_reference", lambda timer, x, out: type("T", (), {"median_us": 5.0})())
    monkeypatch.setattr(reference, "random_input", lambda m, n, dtype: torch.zeros(m, n))
    choices = {"measured": ("fast", {"block": 1}), "predicted": ("fast", {"block": 1}),
               "copied": ("slow", {}), "torch": ("broken", {})}
    row = predicted_picks.time_shape(None, 3, 8, "bf16", choices, rounds=2)
    assert sorted(built) == ["broken", "fast", "slow"]  # each distinct pick built once
    assert row["measured_us"] == row["predicted_us"] == 10.0 and row["copied_us"] == 30.0
    assert row["torch_us"] == "ERR:RuntimeError" and row["copy_us"] == 5.0
    assert row["measured_pick"] == "fast[block=1]"


def test_the_command_times_its_part_of_the_shapes_and_writes_the_csv(monkeypatch, tmp_path, capsys):
    import json
    import sys

    from autotuner.tune import timing

    timed = []

    def fake_time_shape(timer, m, n, dtype, choices, rounds):
        timed.append((dtype, m, n))
        return {"copy_us": 1.0, **{f"{label}_pick": choice[0] for label, choice in choices.items()},
                **{f"{label}_us": 2.0 if label == "torch" else 1.0 for label in choices}}

    monkeypatch.setattr(predicted_picks, "time_shape", fake_time_shape)
    monkeypatch.setattr(timing, "Timer", lambda *args, **kwargs: None)
    out = tmp_path / "part.csv"
    monkeypatch.setattr(sys, "argv", ["predicted_picks", "--gpu", "h100", "--shapes", "4", "--seed", "3",
                                      "--labels", "copied,torch", "--part", "2/3", "--out", str(out)])
    predicted_picks.main()
    every = [(dtype, m, n) for m, n in predicted_picks.random_shapes(4, 3) for dtype in predicted_picks.DTYPES]
    assert timed == every[1::3]
    summary = json.loads(capsys.readouterr().out)
    assert summary["shapes"] == 4 and summary["torch"]["vs_measured_geomean"] == 2.0
    assert summary["copied"]["vs_measured_geomean"] == 1.0  # measured is always timed, as the baseline
