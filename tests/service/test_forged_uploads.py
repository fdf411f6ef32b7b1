"""Forged uploads: every implausible run of issues 31 and 45 (and more) is refused with a 4xx naming the
rule and the rows, nothing of the document is stored, and ``/dispatch`` answers exactly as before; genuine
recorded runs are still accepted."""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.engine import make_engine
from db.models import CandidateRow, CopyReference, GpuModel, Measurement, SweepRun
from service.app import create_app
from service.config import Settings

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDED = DATA / "h100_heldout.json.gz"
ANY_GPU_TOKEN = "any-gpu-token-0123456789"
H100_TOKEN = "h100-only-token-0123456789"
SHAPES = [(1, 1048576), (4096, 32000), (3, 2500), (64, 4096), (32768, 128)]


@pytest.fixture(scope="module")
def recorded_run() -> dict:
    """The first run of a recorded H100 sweep, 1,381 rows as measured."""
    with gzip.open(RECORDED, "rt") as handle:
        document = json.load(handle)
    return {"format_version": document["format_version"], "runs": [document["runs"][0]]}


def serve(folder: Path):
    url = f"sqlite:///{folder / 'central.sqlite'}"
    settings = Settings(database_url=url, upload_token=ANY_GPU_TOKEN, upload_tokens=f"h100:{H100_TOKEN}",
                        reload_interval_s=0)
    with TestClient(create_app(settings)) as client:
        yield client, url


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the refusals (each test checks that nothing was stored, so they cannot interfere)."""
    yield from serve(tmp_path_factory.mktemp("forged"))


@pytest.fixture
def fresh_server(tmp_path):
    yield from serve(tmp_path)


def stored(url: str) -> tuple[int, ...]:
    engine = make_engine(url, create=False)
    with Session(engine) as session:
        counts = tuple(session.scalar(select(func.count()).select_from(model))
                       for model in (GpuModel, SweepRun, CandidateRow, Measurement, CopyReference))
    engine.dispose()
    return counts


def answers(client: TestClient) -> list[dict]:
    return [client.get("/dispatch", params={"m": m, "n": n, "dtype": dtype, "gpu": gpu}).json()
            for m, n in SHAPES for dtype in ("bf16", "fp32") for gpu in ("h100", "h200")]


def ok_rows(run: dict) -> list[dict]:
    return [row for row in run["measurements"] if row["status"] == "ok"]


def every_ok_row(**values):
    def forge(run: dict) -> None:
        for row in ok_rows(run):
            row.update(values)
    return forge


def quantiles_reversed(run: dict) -> None:
    for row in ok_rows(run):
        row["p20_us"], row["p80_us"] = row["median_us"] * 2, row["median_us"] / 2


def claims_h200(run: dict) -> None:  # an H100 recording relabelled: the device name still says H100
    run["gpu"]["key"] = "h200"


def claims_h200_by_name_too(run: dict) -> None:  # relabelled throughout, but an H100's 79 GiB of memory
    run["gpu"].update(key="h200", name="NVIDIA H200", l2_bytes=62914560)


def new_gpu(run: dict) -> None:
    run["gpu"].update(key="h100-fake-x", name="NVIDIA H100-fake-x")


def new_gpu_under_a_real_name(run: dict) -> None:
    run["gpu"].update(key="zz100", name="NVIDIA H100 80GB HBM3")


def failed_row_with_a_time(run: dict) -> None:
    failed = next(row for row in run["measurements"] if row["status"] != "ok")
    failed.update(median_us=0.01, p20_us=0.01, p80_us=0.01)


def copy_reference_at_light_speed(run: dict) -> None:
    for copy_row in run["copy_references"]:
        copy_row.update(median_us=1e-3, p20_us=1e-3, p80_us=1e-3, gbps=None)


def wrong_sm_count(run: dict) -> None:
    run["gpu"]["sm_count"] = 200


def at_fraction_of_peak(fraction: float, timing: str = "cold"):
    """Every ok row claimed at ``fraction`` of the H100's datasheet DRAM peak."""
    def forge(run: dict) -> None:
        run["timing_method"] = timing
        for row in ok_rows(run):
            moved = 2 * row["m"] * row["n"] * {"fp32": 4, "fp16": 2, "bf16": 2}[row["dtype"]]
            us = moved / (fraction * 3350.0) / 1e3
            row.update(median_us=us, p20_us=us, p80_us=us, gbps=None)
    forge.__name__ = f"at_{fraction}_of_peak_{timing}"
    return forge


def spoofs_h200_without_properties(run: dict) -> None:  # the spoof: properties left out
    run["gpu"].update(key="h200", name="NVIDIA H200", sm_count=None, memory_bytes=None, compute_capability=None)


def spoofs_h100_nvl(run: dict) -> None:
    run["gpu"].update(key="h100-nvl", name="NVIDIA H100 NVL")


def a_row_of_no_rows(run: dict) -> None:
    ok_rows(run)[0]["m"] = 0


def undeclared_config(run: dict) -> None:  # the cuda_block_online {"block": 3, "items": 999}
    run["candidates"][0].update(variant="cuda_block_online", config_key="block=3,items=999",
                                config={"block": 3, "items": 999})


def a_16_bit_kernel_at_fp32(run: dict) -> None:
    index = next(i for i, c in enumerate(run["candidates"]) if c["variant"] == "cuda_packed16")
    next(row for row in ok_rows(run) if row["candidate"] == index)["dtype"] = "fp32"


def unknown_variant(run: dict) -> None:
    run["candidates"][1]["variant"] = "cuda_fastest_ever"


def first_row_resources(**values):
    def forge(run: dict) -> None:
        ok_rows(run)[0].update(values)
    forge.__name__ = "resources_" + "_".join(values)
    return forge


FORGERIES = [
    (every_ok_row(median_us=1e-300, p20_us=1e-300, p80_us=1e-300, gbps=None), "copy-floor"),
    (every_ok_row(median_us=1e308, p20_us=1e308, p80_us=1e308, gbps=None), "time-ceiling"),
    (every_ok_row(median_us=0.01, p20_us=0.01, p80_us=0.01, gbps=None), "launch-floor"),  # the 0.01 us
    (every_ok_row(gbps=1e12), "gbps"),
    (quantiles_reversed, "quantile-order"),
    (every_ok_row(max_rel_error=1e9), "status-error"),
    (claims_h200, "gpu-name"),
    (claims_h200_by_name_too, "gpu-properties"),
    (new_gpu, "unknown-gpu"),
    (new_gpu_under_a_real_name, "unknown-gpu"),
    (failed_row_with_a_time, "status-error"),
    (copy_reference_at_light_speed, "launch-floor"),
    (wrong_sm_count, "gpu-properties"),
    # issue 45's loose bounds, and more of their class
    (at_fraction_of_peak(0.99), "copy-floor"),
    (at_fraction_of_peak(1.0), "copy-floor"),
    (at_fraction_of_peak(0.96), "copy-floor"),
    (at_fraction_of_peak(4.0, "warm"), "copy-floor"),
    (at_fraction_of_peak(3.0, "graph"), "copy-floor"),
    (every_ok_row(median_us=0.55, p20_us=0.5, p80_us=0.6, gbps=None), "launch-floor"),
    (every_ok_row(median_us=2.0, p20_us=2.0, p80_us=2.0, gbps=None), "launch-floor"),
    (first_row_resources(registers=2**62), "resources"),
    (first_row_resources(threads_per_block=2**62), "resources"),
    (first_row_resources(dynamic_smem=2**62), "resources"),
    (first_row_resources(occupancy=0.0), "resources"),
    (first_row_resources(spill_bytes=2**40), "resources"),
    (a_row_of_no_rows, "shape"),
    (spoofs_h200_without_properties, "gpu-properties"),
    (spoofs_h100_nvl, "gpu-properties"),
    (undeclared_config, "unknown-config"),
    (a_16_bit_kernel_at_fp32, "unsupported-dtype"),
    (unknown_variant, "unknown-variant"),
]


@pytest.mark.parametrize("forge, rule", FORGERIES, ids=[f"{f.__name__ if hasattr(f, '__name__') else 'rows'}-{r}"
                                                         for f, r in FORGERIES])
def test_a_forged_upload_is_refused_and_nothing_changes(server, recorded_run, forge, rule):
    client, url = server
    before = answers(client)
    forged = copy.deepcopy(recorded_run)
    genuine = copy.deepcopy(recorded_run["runs"][0])
    genuine["host"] = "another-host"  # a valid run beside the forged one must not be stored either
    forge(forged["runs"][0])
    forged["runs"].append(genuine)
    response = client.post("/runs", json=forged, headers={"Authorization": f"Bearer {ANY_GPU_TOKEN}"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert f"rule {rule}" in body["message"] and "runs[0]" in body["message"] and "nothing stored" in body["message"]
    assert body["detail"] and all(problem["loc"].startswith("runs[0]") for problem in body["detail"])
    assert stored(url) == (0, 0, 0, 0, 0)
    assert answers(client) == before


def test_a_scoped_token_cannot_upload_another_gpu(server, recorded_run):
    client, url = server
    forged = copy.deepcopy(recorded_run)
    forged["runs"][0]["gpu"].update(key="h200", name="NVIDIA H200", memory_bytes=150109880320)
    response = client.post("/runs", json=forged, headers={"Authorization": f"Bearer {H100_TOKEN}"})
    assert response.status_code == 403, response.text
    assert "rule gpu-scope" in response.json()["message"] and "'h200'" in response.json()["message"]
    assert stored(url) == (0, 0, 0, 0, 0)


def test_the_message_names_the_first_rows_and_counts_the_rest(server, recorded_run):
    client, _ = server
    forged = copy.deepcopy(recorded_run)
    every_ok_row(gbps=1e12)(forged["runs"][0])
    message = client.post("/runs", json=forged, headers={"Authorization": f"Bearer {ANY_GPU_TOKEN}"}).json()["message"]
    count = len(ok_rows(forged["runs"][0]))
    assert f"rule gbps, {count} place(s)" in message and f"(and {count - 3} more)" in message
    assert "runs[0].measurements[0]: 3x2500 bf16: gbps 1e+12 is not bytes / median" in message


@pytest.mark.parametrize("token", [ANY_GPU_TOKEN, H100_TOKEN])
def test_a_genuine_recorded_run_is_accepted(fresh_server, recorded_run, token):
    client, url = fresh_server
    response = client.post("/runs", json=recorded_run, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201, response.text
    run = recorded_run["runs"][0]
    assert response.json()["measurements"] == len(run["measurements"])
    assert stored(url)[3:] == (len(run["measurements"]), len(run["copy_references"]))


@pytest.mark.parametrize("recording", ["h200_heldout.json.gz", "h100_new_configs.json.gz"])
def test_genuine_recordings_of_other_runs_are_accepted(fresh_server, recording):
    """Whole recordings: the H200's (26 candidates of configs since retired) and the H100's new configs."""
    client, url = fresh_server
    with gzip.open(DATA / recording, "rt") as handle:
        document = json.load(handle)
    response = client.post("/runs", json=document, headers={"Authorization": f"Bearer {ANY_GPU_TOKEN}"})
    assert response.status_code == 201, response.text[:2000]
    assert stored(url)[3] == sum(len(run["measurements"]) for run in document["runs"])


def test_a_document_nested_thousands_deep_is_a_422_and_the_upload_process_lives(tmp_path, recorded_run):
    """JSON nested 5,000 deep had crashed the upload process twice per request (503): now 422 naming the
    rule, before anything is decoded; the same process serves the next upload."""
    url = f"sqlite:///{tmp_path / 'deep.sqlite'}"
    settings = Settings(database_url=url, upload_token=ANY_GPU_TOKEN, reload_interval_s=0, shipped_tables=False)
    auth = {"Authorization": f"Bearer {ANY_GPU_TOKEN}", "Content-Type": "application/json"}
    with TestClient(create_app(settings)) as client:
        genuine = json.dumps(recorded_run)
        for depth in (33, 5000, 200_000):
            deep = genuine.replace('"grid": {', '"grid": {"deep": ' + "[" * depth + "]" * depth + ", ", 1)
            response = client.post("/runs", content=deep, headers=auth)
            assert response.status_code == 422, response.text[:500]
            assert "nesting-depth" in response.text and "32 levels" in response.text
        assert stored(url) == (0, 0, 0, 0, 0)
        assert client.post("/runs", content=genuine, headers=auth).status_code == 201
        health = client.get("/healthz").json()["upload_process"]
        assert health["restarts"] == 0 and health["last_exit"] is None


def test_a_run_listing_more_candidates_than_any_sweep_is_refused_early(fresh_server, recorded_run):
    client, url = fresh_server
    forged = copy.deepcopy(recorded_run)
    first = forged["runs"][0]["candidates"][0]
    forged["runs"][0]["candidates"] += [{**first, "source_hash": f"h{i}"} for i in range(2000)]
    response = client.post("/runs", json=forged, headers={"Authorization": f"Bearer {ANY_GPU_TOKEN}"})
    assert response.status_code == 422 and "rule too-many-candidates" in response.json()["message"]
    assert stored(url) == (0, 0, 0, 0, 0)
