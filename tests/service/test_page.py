"""GET /: the dispatch-map page, as HTML and as a headless-Chromium screenshot."""
from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from db import queries
from db.engine import make_engine, transaction
from scripts.screenshot_page import find_browser, take_screenshot
from service.app import create_app
from service.page import PALETTE, densified, variant_colours
from tests.service.fixture_data import MS, NS, VARIANTS, copy_time_us, table_payload


def test_page_shows_a_map_per_gpu_and_dtype_with_legend_and_regret(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    for anchor in ("a100-bf16-cold", "a100-fp16-cold", "h100-bf16-cold", "h100-fp16-cold"):
        assert f'<section id="{anchor}">' in page
    assert page.count("<svg") == 8  # measured map and lookup map per table
    assert "geomean <b>1.012×</b>" in page and "leave-one-out" in page
    for variant in VARIANTS:
        assert variant.name in page
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_measured_cells_carry_the_fraction_of_speed_of_light(client):
    page = client.get("/", params={"gpu": "h100", "dtype": "bf16"}).text
    assert page.count("<section") == 1
    m, n = MS[-1], NS[-1]
    best = min(v.time_us(m, n, "bf16") for v in VARIANTS if v.time_us(m, n, "bf16") is not None)
    expected = f"{copy_time_us(m, n, 'bf16') / best:.2f}"
    cells = re.findall(r"<title>M=32768 N=131072: [^<]*</title><rect[^>]*/><text[^>]*>([0-9.]+)</text>", page)
    assert cells == [expected]
    assert len(re.findall(r'class="sol">', page)) == len(MS) * len(NS)


def test_page_filters_validate_and_an_empty_selection_says_what_to_do(client):
    assert client.get("/", params={"dtype": "float16"}).text.count("<section") == 2
    assert client.get("/", params={"dtype": "int8"}).status_code == 422
    empty = client.get("/", params={"gpu": "b200"}).text
    assert "No dispatch tables match" in empty


def test_page_escapes_what_tables_contain(settings):
    engine = make_engine(settings.database_url)
    with transaction(engine) as session:
        gpu = queries.get_or_create_gpu(session, "l40s", "<script>alert(1)</script>")
        queries.save_table(session, gpu, "fp32", "cold", table_payload("l40s", "<script>alert(1)</script>", "fp32", 1),
                           source_runs=[1], candidate_count=len(VARIANTS))
    engine.dispose()
    with TestClient(create_app(settings)) as client:
        page = client.get("/", params={"gpu": "l40s"}).text
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_colours_are_stable_and_distinct_per_variant():
    colours = variant_colours(["b", "a", "c", "a"])
    assert colours == {"a": PALETTE[0], "b": PALETTE[1], "c": PALETTE[2]}
    assert densified([1, 4, 64]) == [1, 2, 4, 16, 64]


@pytest.mark.skipif(find_browser() is None, reason="no chromium on this machine (apt-get install chromium)")
def test_screenshot_of_the_page_shows_the_maps(live_server, tmp_path):
    width, height = 1400, 1100
    shot = take_screenshot(f"{live_server.base_url}/?dtype=bf16", tmp_path / "page.png", (width, height))
    data = Path(shot).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (width, height)
    # A blank or error page compresses to a few kilobytes; two tables of coloured maps with text do not.
    assert len(data) > 60_000
