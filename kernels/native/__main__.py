"""``python -m kernels.native``: build the native launch module for this Python and torch, print where
it went (exit 1 with the compiler's output where it fails). ``--force`` rebuilds."""
from __future__ import annotations

import argparse
import sys
import time

from kernels import native


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.native", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if built for this torch already")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        path = native.build(force=args.force)
    except native.NativeBuildError as exc:
        print(f"native launch module not built: {exc}", file=sys.stderr)
        return 1
    print(f"native launch module: {path} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
