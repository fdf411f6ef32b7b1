"""Pinned source hashes (kernels/source_hash.py): comments are free to edit, code changes are not silent."""
from __future__ import annotations

import gzip
import json
import re
import textwrap
from pathlib import Path

import pytest

from autotuner.fit.samples import recording_paths
from kernels import all_variants, get_variant
from kernels.base import hash_files
from kernels.source_hash import code_text, content_hash, pinned_hash, pins

ROOT = Path(__file__).resolve().parents[2]
VARIANT_NAMES = {v.name for v in all_variants()}


def test_every_pinned_variant_still_has_the_code_of_its_pin():
    """A failure here means a pinned variant's code changed: its recorded rows no longer describe it.
    Retire them on purpose with `python scripts/pin_sources.py --drop NAME` (then refit)."""
    names = {v.name for v in all_variants()}
    assert pins(), "kernels/source_pins.json is missing or empty"
    for name, pin in pins().items():
        assert name in names, f"pin for unknown variant {name}"
        variant = get_variant(name)
        assert content_hash(variant.source_files()) == pin["content"], f"{name}: code changed since its pin"
        assert variant.source_hash() == pin["recorded"]


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def _probe_variant(name, source):
    """A variant class named ``name`` whose only source file is ``source``."""
    from kernels.base import Variant

    class Probe(Variant):
        backend = "torch"

        def all_configs(self):
            return []

        def build(self, config, dtype, n):
            raise NotImplementedError

        def source_files(self):
            return [source]

    Probe.name = name
    return Probe


def test_docstrings_and_comments_do_not_change_the_code_hash(tmp_path):
    before = [_write(tmp_path / "a.py", '''
        """Module doc citing an old probe."""
        def f(x):
            """Doc."""
            return x + 1  # a comment
        '''), _write(tmp_path / "k.cu", "// note\n__global__ void k() { /* body */ int a = 1; }\n")]
    reference = content_hash(before)
    _write(tmp_path / "a.py", '''
        """Reworded module doc."""
        def f(x):
            return x + 1
        ''')
    _write(tmp_path / "k.cu", "// other note\n__global__ void k() {\n    int a = 1;\n}\n")
    assert content_hash(before) == reference
    _write(tmp_path / "a.py", "def f(x):\n    return x + 2\n")
    assert content_hash(before) != reference


def test_a_string_that_is_not_a_docstring_is_code(tmp_path):
    path = _write(tmp_path / "a.py", 'def f():\n    x = "kept"\n    return x\n')
    assert "kept" in code_text(path)


@pytest.mark.parametrize("changed", [False, True])
def test_pinned_hash_answers_the_recorded_hash_only_while_the_code_matches(tmp_path, monkeypatch, changed):
    path = _write(tmp_path / "v.py", "def f():\n    return 1\n")
    pinned = {"v": {"recorded": "r" * 16, "content": content_hash([path])}}
    monkeypatch.setattr("kernels.source_hash.pins", lambda: pinned)
    if changed:
        _write(path, "def f():\n    return 2\n")
    assert pinned_hash("v", [path]) == (None if changed else "r" * 16)
    assert hash_files([path])  # the full-text hash a changed variant falls back to


def test_source_hash_is_worked_out_once_while_the_files_stay_the_same(tmp_path, monkeypatch):
    """Sweep plans ask once per config; the hash is kept until a source file changes (mtime, size)."""
    source = _write(tmp_path / "k.py", "def f():\n    return 1\n")
    Probe = _probe_variant("probe_variant", source)
    calls = []
    monkeypatch.setattr("kernels.base.hash_files", lambda paths: calls.append(paths) or hash_files(paths))
    probe = Probe()
    first = probe.source_hash()
    assert probe.source_hash() == first and len(calls) == 1
    _write(source, "def f():\n    return 12\n")  # one byte longer: a new size whatever the clock
    assert probe.source_hash() != first and len(calls) == 2


def test_code_text_leaves_out_what_python_versions_add_or_omit(tmp_path):
    """The pins' code hash must not depend on the Python reading the file: 3.12's ast adds
    ``type_params=[]`` to every function and 3.13's dump omits empty fields. A device on 3.12 had
    recorded a pinned Triton variant under its full-text hash because of it."""
    text = code_text(_write(tmp_path / "a.py", "class K:\n    def f(self, x):\n        return x\n"))
    assert "FunctionDef" in text and "ClassDef" in text
    assert "type_params" not in text and "=[]" not in text and "=None" not in text


@pytest.mark.parametrize("pinned", [True, False])
def test_rows_under_the_full_text_hash_of_a_pinned_variant_are_current(tmp_path, monkeypatch, pinned):
    """``current_hashes``: a pinned variant's rows are current under its recorded hash and under its
    files' full-text hash (both name today's code); an unpinned one's under its source hash alone."""
    source = _write(tmp_path / "k.py", "def f():\n    return 1\n")
    Probe = _probe_variant("probe_pinned", source)
    table = {"probe_pinned": {"recorded": "r" * 16, "content": content_hash([source])}} if pinned else {}
    monkeypatch.setattr("kernels.source_hash.pins", lambda: table)
    hashes = Probe().current_hashes()
    assert hashes == ({"r" * 16, hash_files([source])} if pinned else {hash_files([source])})


def test_also_recorded_hashes_are_current_only_while_the_code_matches_the_pin(tmp_path, monkeypatch):
    """A pin's ``also_recorded``: rows a host recorded of the pinned code under another hash (its pin
    check had failed) stay current after a re-pin, and retire with the code like the others."""
    source = _write(tmp_path / "k.py", "def f():\n    return 1\n")
    Probe = _probe_variant("probe_also", source)
    table = {"probe_also": {"recorded": "r" * 16, "content": content_hash([source]), "also_recorded": ["a" * 16]}}
    monkeypatch.setattr("kernels.source_hash.pins", lambda: table)
    assert Probe().current_hashes() == {"r" * 16, "a" * 16, hash_files([source])}
    _write(source, "def f():\n    return 22\n")
    assert Probe().current_hashes() == {hash_files([source])}


def _recordings_by_gpu() -> dict[str, list[Path]]:
    """The recordings each GPU's shipped tables were fitted from, as autotuner/tables/README.md's
    refit commands import them (the paths in the command lines, indented, before its ``autotuner fit
    --gpu <gpu>`` line; the prose names them too)."""
    lines = (ROOT / "autotuner" / "tables" / "README.md").read_text().splitlines()
    text = "\n".join(line for line in lines if line.startswith("    "))
    found: dict[str, list[Path]] = {}
    rest = text
    for gpu in re.findall(r"autotuner fit --gpu (\w+) --db", text):
        before, rest = rest.split(f"autotuner fit --gpu {gpu} --db", 1)
        found[gpu] = [ROOT / p for p in re.findall(r"((?:tests|bench)/data/[\w.-]+\.json\.gz)", before)]
    return found


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_every_time_a_shipped_table_holds_has_a_current_row_in_its_recordings(gpu):
    """A refit from the committed recordings gives the shipped tables again only where the fit still
    reads the rows they were fitted on: a fit reads a row only under a hash of today's code
    (``current_hashes``). The H100 domain sweep's Triton rows, recorded under full-text hashes,
    had silently retired with a host-code edit of their variants: a refit lost 1,534 triton_one_row
    and 3,054 triton_fused_row rows and its leave-one-out regret rose from 1.013-1.019 to 1.031-1.034."""
    recordings = recording_paths(ROOT, [gpu])  # the README's refit imports (the test below)
    assert recordings and all(path.is_file() for path in recordings), recordings
    current_hashes: dict[str, frozenset[str]] = {}
    current: set[tuple[str, str, str, int, int]] = set()  # (variant, config_key, dtype, m, n) of current rows
    for path in recordings:
        for run in json.loads(gzip.decompress(path.read_bytes()))["runs"]:
            if run["gpu"]["key"] != gpu:
                continue
            for row in run["measurements"]:
                candidate = run["candidates"][row["candidate"]]
                name = candidate["variant"]
                if name not in current_hashes:
                    current_hashes[name] = get_variant(name).current_hashes() if name in VARIANT_NAMES else frozenset()
                if row["status"] == "ok" and candidate["source_hash"] in current_hashes[name]:
                    current.add((name, candidate["config_key"], row["dtype"], row["m"], row["n"]))
    for table_path in sorted((ROOT / "autotuner" / "tables").glob(f"{gpu}_*.json")):
        table = json.loads(table_path.read_text())
        labels = [(c["variant"], c["config_key"]) for c in table["candidates"]]
        lost = [(*labels[i], point["m"], point["n"]) for point in table["points"]
                for i, time in enumerate(point["times"])
                if time is not None and (*labels[i], table["dtype"], point["m"], point["n"]) not in current]
        assert not lost, f"{table_path.name}: {len(lost)} times without a current row, e.g. {lost[:3]}"


def test_the_recordings_predictions_read_are_those_the_shipped_tables_are_fitted_from():
    """``autotuner predict`` and the quick sweep read ``RECORDINGS``; the measured tables are fitted from
    the README's refit commands. The cluster rows of 4bf0215 went into the H100 refit and not into
    ``RECORDINGS``, so the predicted tables no longer came from the recordings the README names."""
    from autotuner.fit.samples import RECORDINGS

    assert {gpu: recording_paths(ROOT, [gpu]) for gpu in RECORDINGS} == _recordings_by_gpu()
