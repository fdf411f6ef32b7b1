"""Pin every variant's source hash (kernels/source_pins.json; see kernels/source_hash.py).

    python scripts/pin_sources.py            # pin every variant as its files are now
    python scripts/pin_sources.py --drop NAME [NAME ...]   # forget pins: those variants' rows retire

A variant already pinned keeps its recorded hash while its code matches the pin; pin a new variant
only while its recorded rows are of its current code.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import all_variants  # noqa: E402
from kernels.source_hash import PINS_PATH, content_hash, pins  # noqa: E402


def main(argv: list[str]) -> int:
    current = dict(pins())
    if argv[:1] == ["--drop"]:
        for name in argv[1:]:
            if current.pop(name, None) is None:
                print(f"no pin for {name!r}; pinned: {', '.join(sorted(current))}", file=sys.stderr)
                return 2
    elif argv:
        print(__doc__, file=sys.stderr)
        return 2
    else:
        for variant in all_variants():
            files = variant.source_files()
            if files and variant.backend != "external":
                # source_hash(): the pinned hash while the code matches a pin, else the full-text one
                pin = {"recorded": variant.source_hash(), "content": content_hash(files)}
                kept = current.get(variant.name, {}).get("also_recorded")
                if kept and pin["recorded"] == current[variant.name]["recorded"]:
                    pin["also_recorded"] = kept  # rows of the same pinned code, recorded under other hashes
                current[variant.name] = pin
    PINS_PATH.write_text(json.dumps(dict(sorted(current.items())), indent=1) + "\n")
    print(f"{len(current)} variants pinned in {PINS_PATH.relative_to(Path.cwd()) if PINS_PATH.is_relative_to(Path.cwd()) else PINS_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
