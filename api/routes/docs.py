"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served with
their scripts and styles from this host.

FastAPI's own pages load Swagger UI and ReDoc from a CDN: a blank page on a host without
internet, as NPU clusters often are. The assets here are the copies the ``fastapi-offline``
package ships (Swagger UI and ReDoc, under their MIT licenses), mounted at :data:`ASSETS`.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: Where the Swagger UI and ReDoc assets are served.
ASSETS = "/static/docs"
#: swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png
ASSET_DIR = Path(fastapi_offline.__file__).parent / "static"

router = APIRouter(include_in_schema=False)


def install(app: FastAPI) -> None:
    """Serve the assets and the two pages on ``app`` (created with ``docs_url=None`` and
    ``redoc_url=None``, so that FastAPI's CDN pages are not there too)."""
    app.mount(ASSETS, StaticFiles(directory=ASSET_DIR), name="docs-assets")
    app.include_router(router)


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root, app = _root(request), request.app
    return get_swagger_ui_html(
        openapi_url=f"{root}{app.openapi_url}",
        title=f"{app.title} - Swagger UI",
        oauth2_redirect_url=f"{root}{app.swagger_ui_oauth2_redirect_url}",
        swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        swagger_ui_parameters=app.swagger_ui_parameters,
    )


@router.get("/docs/oauth2-redirect")
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root, app = _root(request), request.app
    return get_redoc_html(
        openapi_url=f"{root}{app.openapi_url}",
        title=f"{app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
        with_google_fonts=False,
    )
