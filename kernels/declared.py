"""Writes ``kernels/declared.json``: what every registered variant declares (dtypes, configs, each
config's requirements per dtype), as data, so that a host where a variant's module cannot be imported (a
light install has no Triton) still knows it: the registry's stand-in for such a variant answers from the
file (``kernels.registry.recorded_declarations``), and uploads of its rows are checked against it
(``autotuner/records/plausibility.py``). A test holds the file to the variants wherever they import:

    python -m kernels.declared            # rewrite kernels/declared.json after a variant's declarations change
"""
from __future__ import annotations

import json
import sys
from typing import Any

from kernels.registry import DECLARED_PATH, Declaration, UnimportableVariant, _registered, registered_names


def declaration_of(variant: Any) -> Declaration:
    """``variant``'s declarations as plain data (its module must have imported)."""
    return {"dtypes": list(variant.dtypes),
            "configs": {config.key: {dtype: variant.requirements(config, dtype) for dtype in variant.dtypes}
                        for config in variant.all_configs()}}


def render(declarations: dict[str, Declaration]) -> str:
    """The file's text: one line a variant, so that a change shows as that variant's line."""
    lines = [f"  {json.dumps(name)}: {json.dumps(declarations[name])}" for name in declarations]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def current() -> dict[str, Declaration]:
    """The declarations of every registered variant whose module imports here."""
    return {variant.name: declaration_of(variant) for variant in _registered()
            if not isinstance(variant, UnimportableVariant)}


def main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m kernels.declared   (rewrites kernels/declared.json)", file=sys.stderr)
        return 2
    found = current()
    missing = [name for name in registered_names() if name not in found]
    if missing:  # the file must speak for every variant: write it where all of them import
        print(f"not written: {', '.join(missing)} cannot be imported here (install the test stack)", file=sys.stderr)
        return 1
    DECLARED_PATH.write_text(render(found))
    print(f"wrote {DECLARED_PATH} ({len(found)} variants)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
