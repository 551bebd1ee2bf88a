"""The dashboard: server-rendered HTML (Jinja2 + inline SVG), no front-end build."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from tilewise.api import views
from tilewise.api.deps import MissesDep, SessionDep

router = APIRouter(tags=["dashboard"], include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")


@router.get("/", response_class=HTMLResponse)
def index(request: Request, session: SessionDep, misses: MissesDep) -> HTMLResponse:
    misses.flush()  # before the page's session begins (see tilewise.api.misses.listing)
    return templates.TemplateResponse(request, "index.html", views.index(session))


@router.get("/workloads/{key}", response_class=HTMLResponse)
def workload(request: Request, key: str, session: SessionDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "workload.html", views.workload(session, key))
