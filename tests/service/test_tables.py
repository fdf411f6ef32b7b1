"""GET /gpus and GET /tables/{gpu}/{dtype}: listings, whole documents, ETag revalidation."""
from __future__ import annotations

import json

from db.engine import make_engine
from db.queries import current_tables
from sqlalchemy.orm import Session


def test_gpus_lists_every_gpu_with_its_tables(client):
    body = client.get("/gpus").json()
    assert [entry["gpu"] for entry in body] == ["a100", "h100"]
    h100 = body[1]
    assert h100["name"] == "NVIDIA H100 80GB HBM3"
    assert [(t["dtype"], t["timing_method"], t["source"]) for t in h100["tables"]] == [
        ("bf16", "cold", "database"), ("fp16", "cold", "database")]
    table = h100["tables"][0]
    assert (table["candidates"], table["points"], table["rule"]) == (5, 48, "interp-log")
    assert table["regret"]["geomean"] == 1.012 and table["etag"].startswith('"')


def test_table_is_the_stored_document_with_an_etag(client, database_url):
    response = client.get("/tables/h100/bf16")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    engine = make_engine(database_url)
    with Session(engine) as session:
        stored = next(t.payload for t in current_tables(session, "h100") if t.dtype == "bf16")
    engine.dispose()
    assert response.json() == json.loads(json.dumps(stored))
    etag = response.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) == 34
    assert client.get("/gpus").json()[1]["tables"][0]["etag"] == etag


def test_table_revalidation_answers_304_while_the_etag_matches(client):
    etag = client.get("/tables/h100/bf16").headers["etag"]
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = client.get("/tables/h100/bf16", headers={"If-None-Match": header})
        assert response.status_code == 304, header
        assert response.content == b"" and response.headers["etag"] == etag
    stale = client.get("/tables/h100/bf16", headers={"If-None-Match": '"0000"'})
    assert stale.status_code == 200 and stale.json()["gpu"] == "h100"
    other = client.get("/tables/h100/fp16", headers={"If-None-Match": etag})
    assert other.status_code == 200 and other.headers["etag"] != etag


def test_table_accepts_dtype_aliases_and_device_names(client):
    assert client.get("/tables/h100/bfloat16").json()["dtype"] == "bf16"
    assert client.get("/tables/NVIDIA H100 80GB HBM3/half").json()["dtype"] == "fp16"


def test_table_errors_say_what_is_missing(client):
    unknown = client.get("/tables/b200/bf16")
    assert unknown.status_code == 404 and unknown.json()["known_gpus"] == ["a100", "h100"]
    missing = client.get("/tables/h100/fp32")
    assert missing.status_code == 404 and "fp32/cold on GPU 'h100'" in missing.json()["message"]
    bad = client.get("/tables/h100/int8")
    assert bad.status_code == 422 and bad.json()["message"].startswith("path parameter 'dtype'")
    warm = client.get("/tables/h100/bf16", params={"timing_method": "warm"})
    assert warm.status_code == 404


def test_a_table_says_which_table_answers_and_what_it_was_fitted_from(client, settings):
    from fastapi.testclient import TestClient

    from service.app import create_app

    fitted = client.get("/tables/h100/bf16")
    runs = fitted.json()["source_runs"]
    assert fitted.headers["x-table-source"] == "database" and fitted.headers["x-table-source-runs"] == ",".join(map(str, runs))
    assert fitted.headers["x-table-fitted-at"] == fitted.json()["created_at"]
    summary = client.get("/gpus").json()[1]["tables"][0]
    assert summary["source"] == "database" and summary["source_runs"] == runs
    with TestClient(create_app(settings.model_copy(update={"shipped_tables": True}))) as with_shipped:
        shipped = with_shipped.get("/tables/h200/bf16")
        assert shipped.headers["x-table-source"] == "shipped"
        assert shipped.headers["x-table-source-runs"] == ",".join(map(str, shipped.json()["source_runs"]))
