"""/v1/tilings (lookup for one shape) and /v1/tables (the exported tiling tables)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from tilewise.api.deps import LookupDep, OpDep, SessionDep, TableFiltersDep, WorkloadQueryDep
from tilewise.api.schemas import LookupPublic, WorkloadPublic
from tilewise.export import render_header, table_document

router = APIRouter(prefix="/v1", tags=["tilings"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such op."}}


@router.get("/tilings/{op}", response_model=LookupPublic, responses=_NOT_FOUND)
def lookup_tiling(what: WorkloadQueryDep, lookup: LookupDep) -> LookupPublic:
    """The tiling to launch ``op`` with for one shape: the tuned one (exact), the nearest tuned
    shape's re-derived for this shape when valid for it (nearest), else the op's default
    heuristic (default)."""
    answer = lookup.lookup(
        what.spec.name, target=what.target.name, dtype=what.dtype, shape=what.shape
    )
    return LookupPublic(
        tiling=dict(answer.tiling),
        source=answer.source,
        workload=None if answer.workload is None else WorkloadPublic.of(answer.workload),
        latency_us=answer.latency_us,
        distance=answer.distance,
        rule=answer.rule,
        predicted_gain=answer.predicted_gain,
    )


@router.get(
    "/tables",
    responses={200: {"description": "The tiling table document (format tilewise.tilings)."}},
)
def all_tables(
    session: SessionDep,
    filters: TableFiltersDep,
    format: Annotated[Literal["json"], Query()] = "json",
) -> JSONResponse:
    """Every op's tiling table as one JSON document (what ``tilewise.runtime`` loads)."""
    return JSONResponse(
        table_document(session, op=None, target=filters.target, dtype=filters.dtype)
    )


@router.get(
    "/tables/{op}",
    responses={
        **_NOT_FOUND,
        200: {
            "description": "JSON document, or a C header with format=header.",
            "content": {"application/json": {}, "text/x-c": {}},
        },
    },
)
def op_table(
    spec: OpDep,
    session: SessionDep,
    filters: TableFiltersDep,
    format: Annotated[Literal["json", "header"], Query()] = "json",
) -> Response:
    """One op's tiling table: the JSON document, or the C header a host TilingFunc includes."""
    doc = table_document(session, op=spec.name, target=filters.target, dtype=filters.dtype)
    if format == "json":
        return JSONResponse(doc)
    return PlainTextResponse(
        render_header(doc, op=spec.name),
        media_type="text/x-c",
        headers={"Content-Disposition": f'attachment; filename="tilewise_{spec.name}.h"'},
    )
