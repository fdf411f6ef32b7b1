"""GET /measurements: filters, keyset pagination, bounds, and no full count."""
from __future__ import annotations

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from db import queries
from db.engine import make_engine
from tests.service.fixture_data import MS, NS, VARIANTS

PER_GPU_AND_DTYPE = len(MS) * len(NS) * len(VARIANTS)
ALL_ROWS = 2 * (2 * PER_GPU_AND_DTYPE + 1)  # two GPUs, two dtypes, one 'wrong' row each


def every_item(client, **params) -> list[dict]:
    items, after = [], 0
    while after is not None:
        body = client.get("/measurements", params={**params, "after": after}).json()
        items += body["items"]
        after = body["next_after"]
    return items


def test_first_page_and_its_fields(client):
    body = client.get("/measurements").json()
    assert (body["limit"], body["after"], len(body["items"])) == (100, 0, 100)
    assert body["next_after"] == body["items"][-1]["id"]
    row = body["items"][0]
    assert {"variant", "config", "config_key", "source_hash", "gpu", "timing_method", "median_us", "occupancy",
            "registers", "error", "created_at"} <= set(row)
    assert row["created_at"].endswith("Z")


def test_keyset_pages_cover_every_row_once_in_id_order(client):
    ids = [item["id"] for item in every_item(client, limit=7)]
    assert len(ids) == ALL_ROWS and ids == sorted(set(ids))


def test_the_last_page_says_so(client):
    ids = [item["id"] for item in every_item(client, limit=1000)]
    last = client.get("/measurements", params={"after": ids[-2], "limit": 5}).json()
    assert [item["id"] for item in last["items"]] == ids[-1:] and last["next_after"] is None
    beyond = client.get("/measurements", params={"after": ids[-1]}).json()
    assert beyond["items"] == [] and beyond["next_after"] is None


def test_a_selective_filter_scans_a_bounded_window(database_url, client):
    """With few matches, a page stops at the end of its id window and hands on a cursor (possibly with
    no items); following the cursors still finds every match."""
    with Session(make_engine(database_url)) as session:
        rows, following = queries.search_measurements(session, status="wrong", scan_window=50)
    assert rows == [] and following == 50  # the two 'wrong' rows lie further on
    assert [item["error"] for item in every_item(client, status="wrong")] == ["row sums off by 0.5"] * 2


def test_filters_combine(client):
    items = every_item(client, gpu="h100", dtype="half", variant="cuda_split_row", status="ok", limit=1000)
    assert items and {(r["gpu"], r["dtype"], r["variant"], r["status"]) for r in items} == {("h100", "fp16", "cuda_split_row", "ok")}
    assert all(r["n"] >= 16384 for r in items)  # the split-row variant's n_min
    assert len(every_item(client, gpu="a100", m=512, n=4096, dtype="bf16")) == len(VARIANTS)
    assert every_item(client, gpu="b200") == [] and every_item(client, gpu=" ") == []


def test_no_count_and_no_offset_in_the_sql(database_url):
    statements: list[tuple[str, tuple]] = []
    engine = make_engine(database_url)
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append((args[2], tuple(args[3]))))
    with Session(engine) as session:
        queries.search_measurements(session, after=40, limit=10)
    reads = [(s, p) for s, p in statements if "FROM measurements" in s]
    assert reads and not any("count(" in s.lower() for s, _ in reads)
    page, parameters = reads[0]
    assert "measurements.id > ?" in page and parameters[0] == 40
    assert "OFFSET" not in page or parameters[-1] == 0  # SQLite's dialect always writes an OFFSET; it is 0


def test_offset_paging_answers_422_naming_after(client):
    response = client.get("/measurements", params={"offset": 100})
    assert response.status_code == 422
    assert "after=" in response.json()["message"] and "next_after" in response.json()["message"]
    assert client.get("/measurements", params={"offset": 0}).status_code == 200  # the first page, as before


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"after": -1}, {"after": 2**62 + 1},
                                    {"offset": -1}, {"m": 2**31}, {"n": 0}, {"status": "great"},
                                    {"dtype": "int8"}, {"run_id": 0}, {"timing_method": "hot"}])
def test_rejects_parameters_out_of_bounds(client, params):
    response = client.get("/measurements", params=params)
    assert response.status_code == 422
    assert response.json()["message"].startswith(f"query parameter '{next(iter(params))}'")
