"""The registry names every variant once (kernels/registry.py), whatever is installed: each class agrees
with its entry, and every variant a shipped table can answer is a registered name."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

from kernels.registry import _REGISTRY, UnimportableVariant, all_variants, registered_names

TABLES = Path(__file__).resolve().parents[2] / "autotuner" / "tables"


def test_every_registered_class_has_its_entrys_name_and_backend():
    for name, backend, module, class_name in _REGISTRY:
        cls = getattr(importlib.import_module(module), class_name)  # the test stack installs every backend
        assert (cls.name, cls.backend) == (name, backend), f"{module}.{class_name}"
    assert len(set(registered_names())) == len(_REGISTRY)


def test_a_variant_that_cannot_be_imported_keeps_its_name_and_backend():
    stand_in = UnimportableVariant("triton_one_row", "triton", "import failed: no triton")
    assert (stand_in.name, stand_in.backend) == ("triton_one_row", "triton")
    assert not stand_in.available() and "no triton" in stand_in.available().reason


def test_the_registry_lists_its_names_in_order():
    assert [variant.name for variant in all_variants()][:len(_REGISTRY)] == list(registered_names())


def test_every_variant_a_shipped_table_answers_is_registered():
    answered = {candidate["variant"] for path in TABLES.glob("*.json")
                for candidate in json.loads(path.read_text())["candidates"]}
    assert answered and answered <= set(registered_names())
