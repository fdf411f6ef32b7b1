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


def test_the_declarations_file_is_what_every_variant_declares():
    """kernels/declared.json speaks for a variant wherever its module cannot be imported: it must be
    what the variants declare now (rewrite it with `python -m kernels.declared`)."""
    from kernels.declared import current
    from kernels.registry import recorded_declarations as recorded

    assert set(recorded()) == set(registered_names())  # the test stack imports every variant
    stale = [name for name, declared in current().items() if recorded().get(name) != declared]
    assert not stale, f"kernels/declared.json is stale for {stale}: run python -m kernels.declared"


def test_a_stand_in_declares_what_its_variant_declares():
    from kernels import get_variant
    from kernels.registry import declared_config_keys

    for name in ("triton_one_row", "cuda_cluster_split"):
        real = get_variant(name)
        stand_in = UnimportableVariant(name, real.backend, "import failed: test")
        assert stand_in.dtypes == real.dtypes
        assert [c.key for c in stand_in.all_configs()] == [c.key for c in real.all_configs()]
        assert declared_config_keys(stand_in) == declared_config_keys(real)
        for config in real.all_configs():
            for dtype in real.dtypes:
                assert stand_in.requirements(config, dtype) == real.requirements(config, dtype)
    unknown = UnimportableVariant("not_in_the_file", "triton", "import failed: test")
    assert unknown.all_configs() == [] and unknown.dtypes == ()
