"""The results documents (docs/RESULTS_<GPU>.md) are what `python -m bench.results` makes of the committed
data, and its summaries count what they say they count."""
from __future__ import annotations

import pytest

from bench import results

GPUS = ("h100", "h200")


@pytest.mark.parametrize("gpu", GPUS)
def test_committed_results_document_matches_its_data(gpu):
    path = results.document_path(gpu)
    assert path.exists(), f"{path} missing: run python -m bench.results --gpu {gpu}"
    assert path.read_text() == results.render(gpu), f"{path.name} drifted: run python -m bench.results --gpu {gpu}"


@pytest.mark.parametrize("gpu", GPUS)
def test_results_document_names_its_command_and_data(gpu):
    text = results.render(gpu)
    assert f"python -m bench.results --gpu {gpu}" in text.splitlines()[2]
    for needle in (f"tests/data/{gpu}_sweep.json.gz", f"autotuner/tables/{gpu}_<dtype>_cold.json", "bench/data/"):
        assert needle in text, needle
    for section in ("## Method", "## Speed of light", "## The dispatched `softmax` against its peers",
                    "## Regret", "## Lookup and host costs", "## Sweep time"):
        assert section in text, section


def test_check_fails_on_a_drifted_document_and_passes_after_writing(tmp_path, monkeypatch, capsys):
    target = tmp_path / "RESULTS_H100.md"
    monkeypatch.setattr(results, "document_path", lambda gpu: target)
    target.write_text("# stale\n")
    assert results.main(["--gpu", "h100", "--check"]) == 1
    assert "python -m bench.results --gpu h100" in capsys.readouterr().err
    assert results.main(["--gpu", "H100"]) == 0
    assert results.main(["--gpu", "h100", "--check"]) == 0


def test_unknown_gpu_is_refused_with_what_is_expected():
    with pytest.raises(SystemExit, match="no committed data for GPU 'a10'.*tables/a10_"):
        results.render("a10")
    # a GPU with predicted tables alone (docs/PREDICTION.md) has no measured results either
    with pytest.raises(SystemExit, match="no committed data for GPU 'a100'.*tables/a100_"):
        results.render("a100")


def test_bench_summary_counts_misses_against_the_fastest_peer_and_skips_failed_peers():
    def row(dtype, m, copy, ours, torch="", quack="", liger=""):
        return {"dtype": dtype, "m": str(m), "n": "1024", "copy_us": str(copy), "dispatched_us": str(ours),
                "torch_us": torch, "quack_us": quack, "liger_us": liger}

    rows = [row("fp32", 1, 4.0, 5.0, torch="9", liger="4.8"),        # 5.0 > 1.03 x 4.8: a Liger miss
            row("fp32", 4, 4.0, 4.9, torch="9", liger="4.8"),        # within 3 %
            row("fp16", 1, 8.0, 8.0, quack="ERR:AssertionError", liger="9"),  # QuACK failed: not a peer
            row("fp16", 4, 2.0, 4.0)]                                # no peer ran: counts as within
    lines = results.bench_summary("streams", rows)
    by_dtype = {line.split(" | ")[1].strip("*"): line for line in lines}
    assert "1/2 = 50.0%" in by_dtype["fp32"] and "liger 1" in by_dtype["fp32"]
    assert "2/2 = 100.0%" in by_dtype["fp16"] and "| none |" in by_dtype["fp16"]
    assert "3/4 = 75.0%" in by_dtype["all"]
    assert "0.500 (fp16 4x1024)" in by_dtype["all"]  # the minimum fraction of copy speed, with its shape
