"""GET /: the dispatch-map page, as HTML and as a headless-Chromium screenshot."""
from __future__ import annotations

import itertools
import re
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX
from autotuner.lookup.select import TableStore
from db import queries
from db.engine import make_engine, transaction
from kernels import all_variants
from scripts.screenshot_page import find_browser, read_png, take_screenshot
from service.app import create_app
from service.config import Settings
from service.page import FALLBACK_LABEL, NO_CHOICE, VARIANT_COLOURS, axis_values, colour_of, dispatch_grid
from tests.service.fixture_data import MS, NS, VARIANTS, copy_time_us, table_payload

MAP_PIXELS = 41 * 49 * 10 * 10  # cells of half an octave, 10 x 10 px each
SWATCH = re.compile(r'<span class="swatch" style="background:(#[0-9a-f]{6})"></span>([^<]+?) <span')


def legend_colours(page: str) -> dict[str, str]:
    return {name: colour for colour, name in SWATCH.findall(page)}


def test_page_shows_one_map_per_table_with_legend_and_regret(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    for anchor in ("a100-bf16-cold", "a100-fp16-cold", "h100-bf16-cold", "h100-fp16-cold"):
        assert f'<section id="{anchor}">' in page
    assert page.count('role="img"') == 4  # one map per table
    assert "geomean <b>1.012×</b>" in page and "leave-one-out" in page
    assert set(legend_colours(page)) <= {v.name for v in VARIANTS} | {FALLBACK_LABEL}
    assert len(legend_colours(page)) >= 3
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_map_is_what_select_kernel_answers_and_shades_the_modelled_area(client):
    """Every cell of the grid is the store's answer at the cell's shape; the fixture tables measure up to
    M 32768 and N 131072, so the rest of the domain is answered by the scaling model, hatched."""
    table = client.app.state.tables.store.get("h100", "bf16", "cold")
    grid = dispatch_grid(table)
    ms, ns = axis_values(DOMAIN_M_MAX), axis_values(DOMAIN_N_MAX)
    assert (len(grid), len(grid[0])) == (41, 49) and (ms[0], ms[-1], ns[-1]) == (1, DOMAIN_M_MAX, DOMAIN_N_MAX)
    store = TableStore([table])
    for row, col in itertools.product(range(0, 41, 5), range(0, 49, 6)):
        choice = store.select(ms[row], ns[col], "bf16", gpu="h100")
        expected = None if choice.source == "fallback" else choice.variant
        assert grid[row][col] == (expected, choice.source == "model")
    assert grid[-1][-1][1] and not grid[0][10][1]  # past the measured M and N: modelled; inside: not
    page = client.get("/", params={"gpu": "h100", "dtype": "bf16"}).text
    assert 'fill="url(#hatch)"' in page and "scaling model only" in page
    assert page.count("h0") >= len(MS) * len(NS)  # a dot per measured point


def test_speed_of_light_is_the_geomean_over_measured_points(client):
    page = client.get("/", params={"gpu": "h100", "dtype": "bf16"}).text
    assert page.count("<section") == 1
    table = client.app.state.tables.store.get("h100", "bf16", "cold")
    fractions = [copy_time_us(m, n, "bf16") / table.lookup(m, n).predicted_us for m in MS for n in NS]
    geomean = 1.0
    for fraction in fractions:
        geomean *= fraction ** (1 / len(fractions))
    assert f"speed of light <b>{geomean:.2f}</b>" in page


def test_colours_are_fixed_per_variant_on_every_page(client):
    everything, one = legend_colours(client.get("/").text), legend_colours(client.get("/", params={"gpu": "h100", "dtype": "bf16"}).text)
    assert one and all(everything[name] == colour for name, colour in one.items())
    assert all(colour == colour_of(name) for name, colour in everything.items() if name != FALLBACK_LABEL)
    assert colour_of("a_plugin_variant") == colour_of("a_plugin_variant") and colour_of("a_plugin_variant") not in (NO_CHOICE,)


def _lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB hex colour."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x, y, z = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_every_registered_variant_has_a_colour_unlike_any_other():
    # the product's variants (a test may have registered fakes from tests/autotuner/fakes.py in this process)
    assert {v.name for v in all_variants() if v.backend != "test"} <= set(VARIANT_COLOURS)
    colours = [*VARIANT_COLOURS.values(), NO_CHOICE]
    for first, second in itertools.combinations(colours, 2):
        distance = sum((a - b) ** 2 for a, b in zip(_lab(first), _lab(second))) ** 0.5
        assert distance >= 25, (first, second, distance)
    # the pair: triton_one_row and cuda_packed16 had been #ff9d9a and #ff9da7
    assert VARIANT_COLOURS["triton_one_row"] != VARIANT_COLOURS["cuda_packed16"]


def test_page_of_the_shipped_tables_is_light(database_url):
    with TestClient(create_app(Settings(database_url=database_url, reload_interval_s=0, shipped_tables=True))) as client:
        page = client.get("/")
    # 6 measured and 15 predicted shipped tables (docs/PREDICTION.md); the fixture's 4 fitted share their keys
    assert page.status_code == 200 and page.text.count('role="img"') == 21
    assert len(page.content) <= 500_000, len(page.content)


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


@pytest.mark.skipif(find_browser() is None, reason="no chromium on this machine (apt-get install chromium; "
                                                   "scripts/test.sh installs it where it runs as root)")
def test_screenshot_shows_the_maps_in_the_legend_colours(live_server, tmp_path):
    """Chromium draws the page: every legend swatch's colour appears, the map's colours cover a map's
    area, and the variant winning most cells fills most of the map."""
    width, height = 1200, 900
    with urllib.request.urlopen(f"{live_server.base_url}/?gpu=h100&dtype=bf16", timeout=30) as response:
        page = response.read().decode()
    legend = legend_colours(page)
    shot = take_screenshot(f"{live_server.base_url}/?gpu=h100&dtype=bf16", tmp_path / "page.png", (width, height))
    shot_width, shot_height, rows = read_png(shot)
    assert (shot_width, shot_height) == (width, height)
    counts = Counter()
    for row in rows:
        counts.update(row[i:i + 3].hex() for i in range(0, len(row), 3))
    for name, colour in legend.items():
        assert counts[colour[1:]] >= 14 * 14, f"{name}'s colour {colour} hardly drawn ({counts[colour[1:]]} px)"
    map_pixels = sum(counts[colour[1:]] for colour in legend.values())
    assert map_pixels >= 0.6 * MAP_PIXELS  # the cells, less dots and the modelled area's hatch
    shares = re.findall(r'background:#([0-9a-f]{6})"></span>[^<]+ <span class="count">(\d+) %', page)
    assert len(shares) >= 3
    for colour, percent in shares:  # each variant covers about its share of the map (the hatch and its antialiased edges take up to half of a modelled cell)
        assert counts[colour] >= 0.4 * int(percent) / 100 * MAP_PIXELS, (colour, percent, counts[colour])


@pytest.fixture
def shipped_client(database_url) -> TestClient:
    with TestClient(create_app(Settings(database_url=database_url, reload_interval_s=0, shipped_tables=True))) as client:
        yield client


def sections(page: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', page, flags=re.S))


def test_a_predicted_table_claims_no_measurement_and_no_speed_of_light(shipped_client):
    """A GPU never measured (the shipped B200, L4, ... tables): its points are other GPUs' shapes and its
    copy times a bare bandwidth figure (5e-07 us at 1x1 on the B200), so no "measured points" and no
    speed of light (it read 0.04-0.29 against 0.84-0.90 for the measured GPUs), and no title that names
    the GPU twice ("b200 b200 (predicted)")."""
    for gpu in ("b200", "l4", "l40s"):  # (the fixture database measured an a100)
        section = sections(shipped_client.get("/", params={"gpu": gpu, "dtype": "bf16"}).text)[f"{gpu}-bf16-cold"]
        title = re.search(r"<h2>(.*?)</h2>", section, flags=re.S).group(1)
        assert "predicted, never measured" in title and title.count(gpu) == 1, title
        assert "measured point" not in section and "speed of light <b>" not in section, section
        assert "predicted from the measurements of h100, h200" in section


def test_every_speed_of_light_shown_is_of_measured_copies(shipped_client):
    page = shipped_client.get("/").text
    shown = {anchor: float(found.group(1)) for anchor, section in sections(page).items()
             if (found := re.search(r"speed of light <b>([0-9.]+)</b>", section))}
    assert {"h100-bf16-cold", "h200-fp32-cold"} <= set(shown), shown
    assert all(0.5 <= value <= 1.2 for value in shown.values()), shown
    h100 = shipped_client.app.state.tables.store.get("h100", "bf16", "cold")
    assert f"{len(h100.points)} measured points" in sections(page)["h100-bf16-cold"]


@pytest.mark.skipif(find_browser() is None, reason="no chromium on this machine (apt-get install chromium; "
                                                   "scripts/test.sh installs it where it runs as root)")
def test_the_map_fits_a_narrow_window(live_server, tmp_path):
    """At 420 px wide the map is scaled into the window, not cut off at its right edge (the map is 546 px
    wide at full size): no map colour in the window's last 10 columns, and the map drawn."""
    width = 420
    url = f"{live_server.base_url}/?gpu=h100&dtype=bf16"
    with urllib.request.urlopen(url, timeout=30) as response:
        colours = {bytes.fromhex(colour[1:]) for colour in legend_colours(response.read().decode()).values()}
    shot_width, _, rows = read_png(take_screenshot(url, tmp_path / "narrow.png", (width, 1200)))
    assert shot_width == width
    columns = [x for row in rows for x in range(shot_width) if row[3 * x:3 * x + 3] in colours]
    assert len(columns) >= 0.3 * MAP_PIXELS * ((width - 60) / 546) ** 2, len(columns)
    assert max(columns) < width - 10, f"the map reaches column {max(columns)} of {width}"
