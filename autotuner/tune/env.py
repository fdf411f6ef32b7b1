"""The software environment a measurement is taken under (stored with every sweep run).

Versions come from package metadata where possible; CUDA and driver versions from torch and the
driver. Two runs share an environment row exactly when every version matches.
"""
from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from typing import Any

from kernels.base import hash_text

PACKAGES = {"torch": "torch", "triton": "triton", "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy")}


def package_version(names: str | tuple[str, ...]) -> str | None:
    for name in (names,) if isinstance(names, str) else names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def driver_version() -> str | None:
    try:
        output = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20, check=True).stdout
        return output.strip().splitlines()[0] or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def collect_environment() -> dict[str, Any]:
    """Versions of everything that changes generated code or timings, and their fingerprint."""
    try:
        import torch

        cuda = torch.version.cuda
    except ImportError:
        cuda = None
    versions = {
        "driver": driver_version(),
        "cuda": cuda,
        "torch": package_version(PACKAGES["torch"]),
        "triton": package_version(PACKAGES["triton"]),
        "cupy": package_version(PACKAGES["cupy"]),
        "python": platform.python_version(),
    }
    versions["fingerprint"] = hash_text(*(f"{k}={v}" for k, v in sorted(versions.items())))
    return versions
