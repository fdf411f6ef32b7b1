"""Pinned source hashes (kernels/source_hash.py): comments are free to edit, code changes are not silent."""
from __future__ import annotations

import textwrap

import pytest

from kernels import all_variants, get_variant
from kernels.base import hash_files
from kernels.source_hash import code_text, content_hash, pinned_hash, pins


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
