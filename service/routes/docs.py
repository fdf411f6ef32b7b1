"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), with their scripts served by this service.

FastAPI's default pages load Swagger UI and ReDoc from a CDN, so they are blank on a host without
internet access. The assets come instead from the ``fastapi-offline`` package (a dependency; its
``static`` folder holds the Swagger UI bundle, its CSS and the ReDoc standalone bundle) and are
served under ``/docs-assets``.
"""
from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
ASSET_PACKAGE = "fastapi_offline"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="Softmax autotuner - Swagger UI",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
    )


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return get_redoc_html(openapi_url="/openapi.json", title="Softmax autotuner - ReDoc",
                          redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
                          redoc_favicon_url=f"{ASSETS_PATH}/favicon.png", with_google_fonts=False)


def mount_assets(app: FastAPI) -> None:
    folder = resources.files(ASSET_PACKAGE) / "static"
    app.mount(ASSETS_PATH, StaticFiles(directory=str(folder)), name="docs-assets")
