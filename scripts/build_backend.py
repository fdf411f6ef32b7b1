"""The build backend of ``pip install .`` / ``pip install -e .``: setuptools' own, after one check.

The wheel installs the top-level packages the design names (``autotuner``, ``kernels``, ``db``,
``service``), and ``kernels`` is also the import name of Hugging Face's kernel hub (the ``kernels``
distribution, which ``transformers`` loads). Two distributions that install one top-level package
overwrite each other's files, and Python packaging has no conflict declaration that pip enforces. So
an install built from this tree looks at the environment it installs into (the interpreter's
site-packages) and refuses, naming the other distribution and what to do, where another distribution
already owns one of those names. A prebuilt wheel installs without running any code: ``kernels``
refuses to import in such a shared folder instead (``kernels/__init__.py``, ``kernels/dtypes.py``).
"""
from __future__ import annotations

import sysconfig
from importlib import metadata
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - every other hook is setuptools' own

DISTRIBUTION = "softmax-autotuner"
TOP_LEVEL = ("autotuner", "kernels", "db", "service")


def top_level_names(dist: metadata.Distribution) -> set[str]:
    """The top-level import names a distribution installed: the first part of each file it records."""
    names = set()
    for file in dist.files or ():
        first = file.parts[0] if file.parts else ""
        if first and not first.endswith((".dist-info", ".egg-info", ".data", ".pth")) and first not in ("..", "__pycache__"):
            names.add(first.removesuffix(".py"))
    return names


def foreign_owners(folders: list[str]) -> dict[str, list[str]]:
    """Our top-level names owned by other distributions installed in ``folders``: name -> ["dist version"]."""
    owners: dict[str, list[str]] = {}
    for dist in metadata.distributions(path=folders):
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-") == DISTRIBUTION:
            continue
        for shared in sorted(top_level_names(dist) & set(TOP_LEVEL)):
            owners.setdefault(shared, []).append(f"{name} {dist.version}")
    return owners


def refusal(owners: dict[str, list[str]], folders: list[str]) -> str:
    shared = "; ".join(f"`{name}` from {', '.join(dists)}" for name, dists in sorted(owners.items()))
    hub = " (Hugging Face's kernel hub, which transformers loads)" if "kernels" in owners else ""
    return (f"softmax-autotuner not installed: it installs the top-level packages {', '.join(TOP_LEVEL)}, and "
            f"{' and '.join(dict.fromkeys(folders))} already holds {shared}{hub}; each would overwrite the other's "
            f"files. Install softmax-autotuner into an environment of its own (python -m venv .venv && "
            f".venv/bin/pip install ...), or uninstall the other distribution first.")


def check_environment() -> None:
    paths = sysconfig.get_paths()
    folders = [p for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if Path(p).is_dir()]
    owners = foreign_owners(folders)
    if owners:
        raise SystemExit(refusal(owners, folders))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    check_environment()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    check_environment()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
