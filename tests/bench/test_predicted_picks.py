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
