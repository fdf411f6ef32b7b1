"""HTTP service: a thin FastAPI face over ``autotuner``'s lookup and ``db``'s queries.

``create_app(settings)`` builds the app; ``service.main.run(host, port, settings)`` serves it under
uvicorn (what ``autotuner serve`` calls). Endpoints and configuration: docs/SERVICE.md.

The names below are imported on first use (PEP 562): the upload process imports
``service.upload_worker`` and must not pay for FastAPI and the app's routes at every start.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"create_app": "service.app", "Settings": "service.config"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'service' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
