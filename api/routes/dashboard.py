"""The dashboard: server-rendered HTML (Jinja2 + inline SVG), no front-end build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from tilewise.api import listing, speedups, views
from tilewise.api.axes import Scale
from tilewise.api.deps import MissesDep, SessionDep, SettingsDep

router = APIRouter(tags=["dashboard"], include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")

FiltersDep = Annotated[listing.Filters, Depends(listing.filters)]
OpFiltersDep = Annotated[listing.Filters, Depends(listing.op_filters)]
ScaleDep = Annotated[Scale, Depends(listing.scale)]


@router.get("/", response_class=HTMLResponse)
def index(
    request: Request,
    session: SessionDep,
    misses: MissesDep,
    filters: FiltersDep,
    settings: SettingsDep,
) -> HTMLResponse:
    misses.flush()  # before the page's session begins (see tilewise.api.misses.listing)
    context = views.index(session, settings.lease_s)
    context.update(listing.listed(context["tuned"], filters))
    return templates.TemplateResponse(request, "index.html", context)


@router.get("/workloads/{key}", response_class=HTMLResponse)
def workload(request: Request, key: str, session: SessionDep, scale: ScaleDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "workload.html", views.workload(session, key, scale))


@router.get("/ops/{op}", response_class=HTMLResponse)
def op_page(request: Request, op: str, session: SessionDep, filters: OpFiltersDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "op.html", speedups.op_page(session, op, filters))
