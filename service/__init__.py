"""HTTP service: a thin FastAPI face over ``autotuner``'s lookup and ``db``'s queries.

``create_app(settings)`` builds the app; ``service.main.run(host, port, settings)`` serves it under
uvicorn (what ``autotuner serve`` calls). Endpoints and configuration: docs/SERVICE.md.
"""
from service.app import create_app
from service.config import Settings

__all__ = ["Settings", "create_app"]
