"""The package's version, from its installed metadata (``importlib.metadata``).

A source tree that was never installed (``PYTHONPATH=. python -m autotuner``) has no metadata; it reports
``0+unknown`` rather than guess from files that may not match what runs."""
from __future__ import annotations

DISTRIBUTION = "softmax-autotuner"
UNKNOWN = "0+unknown"


def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN
