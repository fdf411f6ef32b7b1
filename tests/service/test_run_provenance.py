"""POST /runs stores each run with the name of the token that sent it, and never rewrites a stored run:
the same uploader's retry adds nothing (201), another uploader's copy is refused (409), and so is a
retry with a changed row (409); nothing is stored by a refused upload."""
from __future__ import annotations

import copy
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from db.engine import make_engine
from db.models import Measurement, SweepRun
from service.app import create_app
from service.config import Settings
from tests.service.test_runs import document  # noqa: F401 - the fixture: the export of a populated database's run

LAB_A = "lab-a-token-0123456789abcdef"
LAB_B = "lab-b-token-0123456789abcdef"
TOKENS = json.dumps({"lab-a": {"token": LAB_A, "gpus": ["h100"]}, "lab-b": {"token": LAB_B, "gpus": ["h100"]}})


@pytest.fixture
def central(tmp_path):
    url = f"sqlite:///{tmp_path / 'central.sqlite'}"
    with TestClient(create_app(Settings(database_url=url, upload_tokens=TOKENS, reload_interval_s=0))) as client:
        yield client, url


def stored(url: str) -> list[tuple]:
    engine = make_engine(url)
    with Session(engine) as session:
        rows = [tuple(row) for row in session.execute(
            select(SweepRun.id, SweepRun.uploader, Measurement.id, Measurement.median_us)
            .join(Measurement, Measurement.run_id == SweepRun.id).order_by(Measurement.id))]
    engine.dispose()
    return rows


def post(client: TestClient, document: dict, token: str):  # noqa: ANN201
    return client.post("/runs", json=document, headers={"Authorization": f"Bearer {token}"})


def test_runs_are_stored_with_their_uploader_and_never_rewritten(central, document):
    client, url = central
    first = post(client, document, LAB_A)
    assert first.status_code == 201, first.text
    before = stored(url)
    assert before and {uploader for _, uploader, _, _ in before} == {"lab-a"}

    retry = post(client, document, LAB_A)  # a client that saw no answer sends it again
    assert retry.status_code == 201 and retry.json()["runs_reused"] == 1 and retry.json()["measurements"] == 0

    forged = copy.deepcopy(document)  # slower times: plausible (faster ones meet the floors first)
    for row in forged["runs"][0]["measurements"]:
        if row["median_us"]:
            row.update(median_us=row["median_us"] * 1.25, p20_us=row["p20_us"] * 1.25, p80_us=row["p80_us"] * 1.25, gbps=None)
    for token, sent, rule in ((LAB_B, forged, "run-identity"), (LAB_B, document, "run-identity"),
                              (LAB_A, forged, "run-immutable")):
        refused = post(client, sent, token)
        assert refused.status_code == 409, refused.text
        body = refused.json()
        assert f"rule {rule}" in body["message"] and "nothing stored" in body["message"]
        assert body["detail"][0]["loc"].startswith("runs[0]")
    assert stored(url) == before
