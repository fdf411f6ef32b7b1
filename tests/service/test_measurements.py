"""GET /measurements: filters, pagination, bounds."""
from __future__ import annotations

import pytest

from tests.service.fixture_data import MS, NS, VARIANTS

PER_GPU_AND_DTYPE = len(MS) * len(NS) * len(VARIANTS)


def test_measurements_total_counts_every_row(client):
    body = client.get("/measurements").json()
    assert body["total"] == 2 * (2 * PER_GPU_AND_DTYPE + 1)  # two GPUs, two dtypes, one 'wrong' row each
    assert (body["limit"], body["offset"], len(body["items"])) == (100, 0, 100)
    row = body["items"][0]
    assert {"variant", "config", "config_key", "source_hash", "gpu", "timing_method", "median_us", "occupancy",
            "registers", "error", "created_at"} <= set(row)
    assert row["created_at"].endswith("Z")


def test_measurements_filters_combine(client):
    body = client.get("/measurements", params={"gpu": "h100", "dtype": "half", "variant": "cuda_split_row",
                                               "status": "ok", "limit": 1000}).json()
    assert body["total"] == len(body["items"]) > 0
    assert {(r["gpu"], r["dtype"], r["variant"], r["status"]) for r in body["items"]} == {("h100", "fp16", "cuda_split_row", "ok")}
    assert all(r["n"] >= 16384 for r in body["items"])  # the split-row variant's n_min
    shape = client.get("/measurements", params={"gpu": "a100", "m": 512, "n": 4096, "dtype": "bf16"}).json()
    assert shape["total"] == len(VARIANTS)
    wrong = client.get("/measurements", params={"status": "wrong"}).json()
    assert wrong["total"] == 2 and wrong["items"][0]["error"] == "row sums off by 0.5"
    assert client.get("/measurements", params={"gpu": "b200"}).json()["total"] == 0
    assert client.get("/measurements", params={"gpu": " "}).json()["total"] == 0


def test_measurements_pages_do_not_overlap(client):
    first = client.get("/measurements", params={"limit": 7, "offset": 0}).json()
    second = client.get("/measurements", params={"limit": 7, "offset": 7}).json()
    assert first["total"] == second["total"]
    ids = [r["id"] for r in first["items"]] + [r["id"] for r in second["items"]]
    assert len(set(ids)) == 14 and ids == sorted(ids)
    beyond = client.get("/measurements", params={"offset": first["total"]}).json()
    assert beyond["items"] == [] and beyond["total"] == first["total"]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"offset": 2**31},
                                    {"m": 2**31}, {"n": 0}, {"status": "great"}, {"dtype": "int8"},
                                    {"run_id": 0}, {"timing_method": "hot"}])
def test_measurements_rejects_parameters_out_of_bounds(client, params):
    response = client.get("/measurements", params=params)
    assert response.status_code == 422
    assert response.json()["message"].startswith(f"query parameter '{next(iter(params))}'")
