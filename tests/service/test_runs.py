"""POST /runs: bearer token first, then size, then the document; all or nothing."""
from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.records.exchange import export_runs
from db.engine import make_engine
from db.models import CandidateRow, GpuModel, Measurement, SweepRun
from service.app import create_app
from service.config import Settings
from tests.service.fixture_data import UPLOAD_TOKEN


@pytest.fixture
def document(database_url) -> dict:
    """The export of the populated database's h100 run: what a GPU host uploads."""
    engine = make_engine(database_url)
    with Session(engine) as session:
        exported = export_runs(session, gpu_key="h100")
    engine.dispose()
    return exported


@pytest.fixture
def empty_server(tmp_path):
    """A fresh server over a new database: what a central service looks like before any upload."""
    url = f"sqlite:///{tmp_path / 'central.sqlite'}"
    with TestClient(create_app(Settings(database_url=url, upload_token=UPLOAD_TOKEN, reload_interval_s=0))) as client:
        yield client, url


def row_counts(url: str) -> tuple[int, ...]:
    engine = make_engine(url)
    with Session(engine) as session:
        counts = tuple(session.scalar(select(func.count()).select_from(model))
                       for model in (GpuModel, SweepRun, CandidateRow, Measurement))
    engine.dispose()
    return counts


def test_upload_without_or_with_a_wrong_token_is_401(empty_server, document):
    client, url = empty_server
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {UPLOAD_TOKEN}"},
                    {"Authorization": f"Bearer {UPLOAD_TOKEN}x"}):
        response = client.post("/runs", json=document, headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
        assert "token" in response.json()["message"]
    assert row_counts(url) == (0, 0, 0, 0)


def test_authentication_comes_before_reading_the_body(empty_server):
    client, _ = empty_server
    response = client.post("/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 401


def test_a_server_without_a_token_refuses_every_upload(tmp_path, document):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.sqlite'}", upload_token="")
    with TestClient(create_app(settings)) as client:
        response = client.post("/runs", json=document, headers={"Authorization": "Bearer "})
    assert response.status_code == 401 and "no AUTOTUNER_UPLOAD_TOKEN" in response.json()["message"]


def test_an_upload_is_stored_and_served(empty_server, document, auth):
    client, url = empty_server
    response = client.post("/runs", json=document, headers=auth)
    assert response.status_code == 201, response.text
    summary = response.json()
    run = document["runs"][0]
    assert summary == {"run_ids": [1], "runs_created": 1, "runs_reused": 0, "candidates": len(run["candidates"]),
                       "measurements": len(run["measurements"]), "copy_references": len(run["copy_references"]),
                       "gpus": ["h100"]}
    listed = client.get("/measurements", params={"gpu": "h100", "limit": 1000}).json()
    assert len(listed["items"]) == len(run["measurements"]) and listed["next_after"] is None
    again = client.post("/runs", json=document, headers=auth).json()
    assert (again["runs_created"], again["runs_reused"]) == (0, 1)
    assert row_counts(url)[1] == 1


@pytest.mark.parametrize("breakage, place", [
    (lambda d: d["runs"][0]["measurements"][5].update(candidate=99), "body field runs[0]"),
    (lambda d: d["runs"][0]["measurements"][0].update(m=-1), "body field runs[0].measurements[0].m"),
    (lambda d: d["runs"][0]["gpu"].pop("key"), "body field runs[0].gpu.key"),
    (lambda d: d.update(format_version=7), "body field format_version"),
    (lambda d: d["runs"][0]["measurements"][3].update(dtype="int8"), "body field runs[0].measurements[3].dtype"),
    # a time UTC cannot hold (found by the schema fuzz test: it was a 500)
    (lambda d: d["runs"][0].update(finished_at="0001-01-01T00:00:00+01:00"), "body field runs[0].finished_at"),
])
def test_a_bad_document_is_422_naming_the_field_and_writes_nothing(empty_server, document, auth, breakage, place):
    client, url = empty_server
    good_run = copy.deepcopy(document["runs"][0])
    good_run["host"] = "another-host"
    breakage(document)
    document["runs"].insert(0, good_run)  # a valid run before the bad one must not be written either
    document["runs"][0], document["runs"][1] = document["runs"][1], document["runs"][0]
    response = client.post("/runs", json=document, headers=auth)
    assert response.status_code == 422
    assert place in response.json()["message"], response.json()["message"]
    assert row_counts(url) == (0, 0, 0, 0)


@pytest.mark.parametrize("body, expected", [
    (b"", "the body is empty"),
    (b"{not json", "Invalid JSON"),
    (b'{"format_version": 1, "runs": [], "exported_at": Infinity}', "body field exported_at"),
    (b"[1, 2]", "Input should be an object"),
])
def test_a_body_that_is_not_a_document_is_422(empty_server, auth, body, expected):
    client, _ = empty_server
    response = client.post("/runs", content=body, headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 422
    assert expected in response.json()["message"]


def test_non_finite_numbers_are_refused_even_in_free_form_fields(empty_server, document, auth):
    client, url = empty_server
    text = json.dumps(document)
    for broken in (text.replace('"median_us": ', '"median_us": NaN, "was": ', 1),
                   text.replace('"grid": {', '"grid": {"bad": Infinity, ', 1)):
        response = client.post("/runs", content=broken, headers={**auth, "Content-Type": "application/json"})
        assert response.status_code == 422, response.text
    assert "body field runs[0].grid: Invalid JSON: Infinity is not a JSON number" in response.json()["message"]
    assert row_counts(url) == (0, 0, 0, 0)


def test_a_body_over_the_limit_is_413(tmp_path, document, auth):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.sqlite'}", upload_token=UPLOAD_TOKEN, max_upload_bytes=1000)
    with TestClient(create_app(settings)) as client:
        response = client.post("/runs", content=json.dumps(document), headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 413 and "1000 bytes" in response.json()["message"]
