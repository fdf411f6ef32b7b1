"""bench/ holds the experiments and scripts/ only what a user or CI runs; every probe and data file is
in bench/README.md's index, and no probe reaches into private names of the product."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("kernels", "autotuner", "db", "service")
PROBES = sorted(p for p in (ROOT / "bench" / "probes").glob("*.py") if p.name != "__init__.py")


def test_scripts_hold_no_probes():
    assert not [p.name for p in (ROOT / "scripts").iterdir() if p.name.startswith("probe_")]


def test_every_probe_and_data_file_is_in_the_index():
    index = (ROOT / "bench" / "README.md").read_text()
    for path in PROBES:
        assert f"| `{path.stem}`" in index, f"bench/README.md does not list the probe {path.stem}"
    for path in (ROOT / "bench" / "data").iterdir():
        assert f"`{path.name}`" in index, f"bench/README.md does not list bench/data/{path.name}"


def private_uses(source: str) -> list[str]:
    """`from <product> import _x` and `<product module>._x` in one file's source."""
    tree = ast.parse(source)
    product_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PRODUCT:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"from {node.module} import {alias.name}")
                product_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            product_names.update((a.asname or a.name).split(".")[0] for a in node.names
                                 if a.name.split(".")[0] in PRODUCT)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in product_names):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_private_use_finder_sees_both_forms():
    assert private_uses("from kernels.x import _k\nfrom autotuner import runtime\nruntime._plans\n") == \
        ["from kernels.x import _k", "runtime._plans"]
    assert private_uses("import torch\ntorch.cuda._sleep(1)\nfrom autotuner import softmax\n") == []


@pytest.mark.parametrize("path", PROBES, ids=lambda p: p.stem)
def test_probe_uses_only_public_names_of_the_product(path):
    assert private_uses(path.read_text()) == [], path.name
