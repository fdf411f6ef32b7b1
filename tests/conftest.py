"""Test-wide set-up. GPU tests carry ``@pytest.mark.gpu`` and are skipped here, in one place, when
no CUDA device is visible (CI has none). Every test gets its own empty database directory."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine (gpu tests run on the lent device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_database(tmp_path, monkeypatch):
    """Never touch the user's default database from a test."""
    monkeypatch.setenv("AUTOTUNER_DB", f"sqlite:///{tmp_path / 'tuning.sqlite'}")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
