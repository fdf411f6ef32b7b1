"""Serving the app under uvicorn: what ``autotuner serve --host --port --db`` calls."""
from __future__ import annotations

import logging

import uvicorn

from service.app import create_app
from kernels.settings import export, service_environment
from service.config import Settings
from service.http_protocol import uvicorn_http

log = logging.getLogger(__name__)

# On SIGTERM, requests still running after this long are cancelled: an upload being written is then
# abandoned uncommitted (service/upload_worker.py) rather than holding the shutdown for minutes.
GRACEFUL_SHUTDOWN_S = 10


def run(host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None, *,
        workers: int = 1, log_level: str = "info") -> None:
    """Serve until interrupted. ``workers`` > 1 starts that many processes (uvicorn's supervisor);
    they cannot share a ``Settings`` object, so it is handed to them as ``AUTOTUNER_*`` variables."""
    settings = settings or Settings()
    if workers <= 1:
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, http=uvicorn_http())
        return
    export(settings_environment(settings))
    uvicorn.run("service.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level=log_level, access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, http=uvicorn_http())


def settings_environment(settings: Settings) -> dict[str, str]:
    """The variables that make ``Settings()`` in another process equal to ``settings``."""
    values = {
        "database_url": settings.database_url,
        "upload_token": settings.upload_token.get_secret_value() if settings.upload_token else None,
        "upload_tokens": settings.upload_tokens.get_secret_value() if settings.upload_tokens else None,
        "default_gpu": settings.default_gpu,
        "max_m": settings.max_m,
        "max_n": settings.max_n,
        "reload_interval_s": settings.reload_interval_s,
        "max_upload_bytes": settings.max_upload_bytes,
        "shipped_tables": str(settings.shipped_tables).lower(),
    }
    return service_environment(values)
