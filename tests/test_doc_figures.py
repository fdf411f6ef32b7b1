"""The prose of README.md and docs/ carries design, not a lab log: no dated measurement in the README,
DESIGN.md or SERVICE.md (measured figures live in the generated results pages, their history in
bench/README.md and git); every number in prose that the code can produce is checked against the code
here; and CHANGELOG.md is release notes of the package's versions."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = {name: (ROOT / path).read_text() for name, path in
        (("README.md", "README.md"), ("DESIGN.md", "docs/DESIGN.md"), ("SERVICE.md", "docs/SERVICE.md"),
         ("SWEEP.md", "docs/SWEEP.md"))}
# A date (2026-11-27), or a clock time of day (04:02, 13:07 UTC): in these documents, only a measurement
# would carry one.
DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b[0-2]\d:[0-5]\d\b")


def dated_passages(text: str) -> list[str]:
    return [text[max(0, m.start() - 60):m.end() + 20].replace("\n", " ") for m in DATED.finditer(text)]


@pytest.mark.parametrize("name", ["README.md", "DESIGN.md", "SERVICE.md"])
def test_no_dated_measurement_in_the_design_documents(name):
    found = dated_passages(DOCS[name])
    assert not found, f"{name} dates a figure (current figures belong in docs/RESULTS_*.md, history in " \
                      f"bench/README.md and git): {found}"


def test_the_date_finder_sees_the_forms_it_refuses():
    text = "1.72 µs (2026-11-28) and 0.95x (H100 host, 2026-11-27 04:02; H200 at 03:50)"
    assert len(dated_passages(text)) == 4
    assert dated_passages("M 1-16384 x N 32-1024, 2^20, 0.5-1.2, format_version 2, sm_90, 1:2:3:4") == []


def _figures() -> list[tuple[str, str, object, object]]:
    """(document, the passage quoted, the value the code gives, the value quoted)."""
    from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX
    from autotuner.fit.evidence import REPEATABILITY, SPREAD_CAP
    from autotuner.fit.fit import DEFAULT_PRUNE_MARGIN
    from autotuner.fit.guard import COVERAGE_SHARE, GEOMEAN_TOLERANCE, SHAPE_TOLERANCE
    from autotuner.fit.index import RESOLUTION
    from autotuner.fit.model import SCALE_LIMIT
    from autotuner.fit.predict_table import PREDICTED_MODELS
    from autotuner.fit.quick import QUICK_BUDGET_S
    from autotuner.fit.regret import CLAMP_REACH, COLUMN_REACH
    from autotuner.fit.rule import REGRET_CAP
    from autotuner.lookup.select import CACHE_LIMIT, SPELLINGS_KEPT
    from autotuner.report.heldout import HELD_OUT_SETS
    from autotuner.runtime import RECENT_SHAPES
    from autotuner.tune.grid import DEFAULT_M, DEFAULT_N, MAX_TENSOR_BYTES
    from autotuner.tune.retime import SLOWER_THAN_LARGER
    from autotuner.tune.sampling import COARSE_M, COARSE_N, DEFAULT_DOMAIN_BUDGET_S, coarse_shapes
    from autotuner.tune.timing import UNSTABLE_SPREAD
    from kernels.dtypes import DTYPES

    def numbers(text: str) -> list[int]:
        return [2 ** int(v[2:]) if v.startswith("2^") else int(v.replace(",", "")) for v in re.findall(r"2\^\d+|\d[\d,]*", text)]

    def quoted(document: str, pattern: str) -> str:  # in the document's words, line breaks as spaces
        match = re.search(pattern, " ".join(DOCS[document].split()))
        assert match, f"{document} no longer says {pattern!r}: update the passage and this test together"
        return " ".join(match.group(1).split())

    domain_pairs = len(HELD_OUT_SETS["domain"])
    lattice = quoted("README.md", r"lattice \((M [^)]*shapes over 3 dtypes)\)")
    lattice_m, lattice_n = lattice.split(" × N ")
    classic = quoted("README.md", r"fixed grid of earlier versions \((every M in .*?GiB)")
    return [
        ("README.md", "domain set", domain_pairs, int(quoted("README.md", r"domain: all of them, (\d+) shapes a dtype"))),
        ("SWEEP.md", "named sets' domain", (domain_pairs, domain_pairs * len(DTYPES)),
         tuple(numbers(quoted("SWEEP.md", r"\((\d+ \(M, N\), [\d,]+) shapes in all\)")))),
        ("README.md", "predicted files", len(PREDICTED_MODELS) * len(DTYPES),
         int(quoted("README.md", r"regenerates the (\d+) files \(PREDICTED_MODELS"))),
        ("README.md", "quick budget", QUICK_BUDGET_S, 60 * int(quoted("README.md", r"sweep --quick` \(a (\d+) min budget\)"))),
        ("README.md", "domain budget", DEFAULT_DOMAIN_BUDGET_S, 60 * int(quoted("README.md", r"\((\d+) min unless given\)"))),
        ("README.md", "lattice M", list(COARSE_M), numbers(lattice_m.removeprefix("M "))),
        ("README.md", "lattice N", list(COARSE_N), numbers(lattice_n.split(":")[0])),
        ("README.md", "lattice shapes", len(coarse_shapes()), int(lattice.split(": ")[1].split()[0])),
        ("README.md", "classic M", list(DEFAULT_M), numbers(classic.split("×")[0])),
        ("README.md", "classic N", list(DEFAULT_N), numbers(classic.split("every N in")[1].split("with")[0])),
        ("README.md", "sweep cap", MAX_TENSOR_BYTES, 2 ** 30 * int(quoted("README.md", r"at most (\d+) GiB\b"))),
        ("README.md", "domain", (DOMAIN_M_MAX, DOMAIN_N_MAX),
         tuple(numbers(quoted("README.md", r"M \(rows\) from 0 to (2\^\d+) and N")) +
               numbers(quoted("README.md", r"N \(row length\) from 1 to (2\^\d+)")))),
        ("README.md", "re-timed spread", UNSTABLE_SPREAD, 2.0 if "p80 over twice the p20" in DOCS["README.md"] else None),
        ("README.md", "re-timed larger shape", SLOWER_THAN_LARGER,
         float(quoted("README.md", r"or over (\d+)x the same kernel at a larger shape"))),
        ("DESIGN.md", "RECENT_SHAPES", RECENT_SHAPES, int(quoted("DESIGN.md", r"`RECENT_SHAPES` = ([\d,]+)").replace(",", ""))),
        ("DESIGN.md", "answer cache", CACHE_LIMIT, int(quoted("DESIGN.md", r"`CACHE_LIMIT` = ([\d,]+) answers").replace(",", ""))),
        ("DESIGN.md", "spellings kept", SPELLINGS_KEPT, int(quoted("DESIGN.md", r"straight to a reader \((\d+)\)"))),
        ("DESIGN.md", "row reach", CLAMP_REACH, int(quoted("DESIGN.md", r"`CLAMP_REACH` \((\d+)x\)"))),
        ("DESIGN.md", "column reach", COLUMN_REACH, int(quoted("DESIGN.md", r"`COLUMN_REACH` \((\d+)x\)"))),
        ("DESIGN.md", "index resolution", RESOLUTION, 1 / int(quoted("DESIGN.md", r"`RESOLUTION` \(1/(\d+) octave\)"))),
        ("DESIGN.md", "scale limit", SCALE_LIMIT, float(quoted("DESIGN.md", r"exponent > ([\d.]+) \(`SCALE_LIMIT`\)"))),
        ("DESIGN.md", "regret cap", REGRET_CAP, float(quoted("DESIGN.md", r"capped at ([\d.]+) \(past the quick-drop"))),
        ("DESIGN.md", "prune margin", DEFAULT_PRUNE_MARGIN, int(quoted("DESIGN.md", r"no shape loses more than (\d+) %")) / 100),
        ("DESIGN.md", "grid_split waves", _waves(), quoted("DESIGN.md", r"reach (\w+) waves \(`WAVES`\)")),
        ("DESIGN.md", "repeatability", REPEATABILITY, float(quoted("DESIGN.md", r"\|log ratio\| up to ([\d.]+) \(`REPEATABILITY`"))),
        ("DESIGN.md", "spread cap", SPREAD_CAP, float(quoted("DESIGN.md", r"capped at ([\d.]+) \(`SPREAD_CAP`\)"))),
        ("SERVICE.md", "guard coverage", COVERAGE_SHARE,
         int(quoted("SERVICE.md", r"fewer than (\d+) % of today's measured shapes")) / 100),
        ("SERVICE.md", "guard geomean", 1 + GEOMEAN_TOLERANCE,
         float(quoted("SERVICE.md", r"a geometric mean of new / today above ([\d.]+),"))),
        ("SERVICE.md", "guard shape", SHAPE_TOLERANCE, float(quoted("SERVICE.md", r"any shape answered more than ([\d.]+)x slower"))),
    ]


def _waves() -> str:
    from kernels.cuda.grid_split import WAVES

    return {2: "two", 3: "three", 4: "four", 5: "five"}.get(WAVES, str(WAVES))


def _service_figures() -> list[tuple[str, object, object]]:
    from db.queries import SCAN_WINDOW
    from service.fast_dispatch import DEFAULT_MAX_ENTRIES
    from service.routes.measurements import ERROR_CHARS, MAX_PAGE
    from service.routes.runs import MAX_PENDING
    from service.upload_stream import BATCH_ROWS, MAX_ERRORS
    from autotuner.records import physics
    from autotuner.records.exchange import MAX_NESTING_DEPTH
    from autotuner.records.plausibility import MAX_CANDIDATES, MAX_ROWS, MAX_RUNS

    text = " ".join(DOCS["SERVICE.md"].split())

    def after(pattern: str) -> int:
        match = re.search(pattern, text)
        assert match, f"SERVICE.md no longer says {pattern!r}: update the passage and this test together"
        return int(match.group(1).replace(",", ""))

    return [
        ("scan window", SCAN_WINDOW, after(r"at most ([\d,]+) ids scanned past `after`")),
        ("error text cut", ERROR_CHARS, after(r"cut to ([\d,]+) characters")),
        ("page size", MAX_PAGE, after(r"`limit` 1 … ([\d,]+) \(default")),
        ("replayed answers", DEFAULT_MAX_ENTRIES, after(r"per table generation, at most ([\d,]+)\)")),
        ("uploads at once", MAX_PENDING, after(r"more than (\d+) uploads in progress at once")),
        ("rows a batch", BATCH_ROWS, after(r"rows validated ([\d,]+) at a time")),
        ("problems named", MAX_ERRORS, after(r"at most (\d+) problems")),
        ("runs a document", MAX_RUNS, after(r"more than ([\d,]+) runs or")),
        ("rows a document", MAX_ROWS, after(r"runs or ([\d,]+) rows \(measurements")),
        ("candidates a run", MAX_CANDIDATES, after(r"more than ([\d,]+) candidates in a run")),
        ("nesting depth", MAX_NESTING_DEPTH, after(r"no value nested deeper than (\d+) levels")),
        ("launch floors", [round(1000 * v) for v in physics.RECORDED_LAUNCH_FLOOR_US.values()],
         [int(v.replace(".", "")) for v in re.findall(r"H100 (\d\.\d{3}) µs, H200 (\d\.\d{3}) µs", text)[0]]),
        ("launch margin", round(10 * physics.LAUNCH_MARGIN), after(r"both copies\) × 0\.(\d)\b")),
        ("DRAM fraction", (round(1000 * physics.MAX_DRAM_FRACTION), round(1000 * physics.RECORDED_DRAM_FRACTION)),
         tuple(int(v) for v in re.findall(r"at 0\.(\d{3}) of the model's datasheet DRAM peak: the recordings' "
                                           r"highest fraction \(0\.(\d{3})", text)[0])),
        ("L2 bytes a clock", physics.L2_BYTES_PER_CLOCK_PER_SM, after(r"at (\d+) bytes a clock per SM")),
    ]


def test_figures_in_prose_are_the_codes():
    wrong = [(document, what, code, doc) for document, what, code, doc in _figures() if code != doc]
    assert not wrong, f"(document, figure, the code's, the document's): {wrong}"


def test_the_services_limits_in_prose_are_the_codes():
    wrong = [(what, code, doc) for what, code, doc in _service_figures() if code != doc]
    assert not wrong, f"SERVICE.md (figure, the code's, the document's): {wrong}"


def test_the_shapes_the_readme_says_the_h100_tables_hold_are_in_them():
    """README: the classic grid (N 1024-262144, M 1-16384), the short-row sweep (M 16384 and 262144 x
    N 32-1024), the long-row sweep (M 1-128 x N 2^19-2^24) and the domain's lattice corners."""
    from autotuner.lookup.select import load_table_file, shipped_table_files

    readme = " ".join(DOCS["README.md"].split())
    for phrase in ("the classic grid above (N 1024-262144, M 1-16384)", "short-row sweep (M 16384 and 262144 x N 32-1024)",
                   "long-row sweep (M 1-128 x N 2^19-2^24)"):
        assert phrase in readme, phrase
    for path in (p for p in shipped_table_files() if p.name.startswith("h100_")):
        points = {(p["m"], p["n"]) for p in load_table_file(path).points}
        for shape in ((1, 1024), (16384, 262144), (16384, 32), (262144, 1024), (1, 2 ** 19), (128, 2 ** 24),
                      (1, 1), (2 ** 20, 1)):
            if shape[0] * shape[1] * (4 if "fp32" in path.name else 2) <= 2 ** 31:
                assert shape in points, (path.name, shape)


def test_the_changelog_is_release_notes_of_the_packages_versions():
    tomllib = pytest.importorskip("tomllib")
    text = (ROOT / "CHANGELOG.md").read_text()
    assert len(text.splitlines()) <= 150, "CHANGELOG.md is release notes: a page or two"
    versions = re.findall(r"^## (\d+)\.(\d+)\.(\d+) \((unreleased|20\d\d-\d\d-\d\d)\)$", text, flags=re.M)
    assert len(versions) == len(re.findall(r"^## ", text, flags=re.M)) >= 2, "every section is a version"
    numbers = [tuple(map(int, v[:3])) for v in versions]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)
    dates = [v[3] for v in versions if v[3] != "unreleased"]
    assert dates == sorted(dates, reverse=True)
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    newest = ".".join(versions[0][:3])
    if versions[0][3] == "unreleased":  # the version in the making: a development release of it
        assert package.startswith(newest + ".dev"), (package, newest)
    else:
        assert package == newest, (package, newest)


def test_prediction_figures_are_the_shipped_tables():
    """docs/PREDICTION.md's leave-one-GPU-out table (its "predicted" column), the expected regret the
    predicted tables carry, and each measured GPU's own leave-one-out regret: what the shipped tables hold."""
    from autotuner.lookup.select import load_table_file, shipped_table_files

    text = (ROOT / "docs" / "PREDICTION.md").read_text()
    flat = " ".join(text.split())
    tables = [load_table_file(path).document for path in shipped_table_files()]
    predicted = [t for t in tables if t.get("source") == "predicted"]
    held_out = None
    rows = re.findall(r"^\| (H\d+)? ?\| (\w+) \| ([\d.]+) \(\d+\)", text, flags=re.M)
    assert len(rows) == 6, rows  # two GPUs held out, three dtypes
    for gpu, dtype, figure in rows:
        held_out = gpu.lower() or held_out
        carried = {round(t["regret"]["per_gpu"][held_out], 4) for t in predicted if t["dtype"] == dtype}
        assert carried == {float(figure)}, (held_out, dtype, figure, carried)
    expected = dict(re.findall(r"(bf16|fp16|fp32) ([\d.]+)", flat.split("as their expected regret:")[1].split(". ")[0]))
    assert expected and all({round(t["regret"]["geomean"], 4) for t in predicted if t["dtype"] == dt} == {float(v)}
                            for dt, v in expected.items()), expected
    own = re.search(r"H100 ([\d./]+), H200 ([\d.]+/[\d.]+/\d\.\d+)", flat.split("own table scored leave-one-out")[1])
    for gpu, figures in zip(("h100", "h200"), own.groups()):
        for dtype, figure in zip(("bf16", "fp16", "fp32"), figures.split("/")):
            table = next(t for t in tables if t["gpu"] == gpu and t["dtype"] == dtype and t.get("source") != "predicted")
            assert round(table["regret"]["geomean"], 3) == float(figure), (gpu, dtype, figure)
