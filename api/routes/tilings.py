"""/v1/tilings (lookup for one shape), /v1/misses (the shapes it answered without an exact
entry) and /v1/tables (the exported tiling tables)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy.orm import Session

from tilewise.api import misses as missing
from tilewise.api.deps import (
    AnyToolchainQuery,
    LookupDep,
    MissesDep,
    OpDep,
    SessionDep,
    SettingsDep,
    TableFilters,
    TableFiltersDep,
    WorkloadQueryDep,
    blame,
)
from tilewise.api.errors import FieldError
from tilewise.api.schemas import LookupPublic, MissList, WorkloadPublic
from tilewise.export import portfolio_document, render_header, table_document
from tilewise.kernels.ops import get_op

router = APIRouter(prefix="/v1", tags=["tilings"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such op."}}


@router.get("/tilings/{op}", response_model=LookupPublic, responses=_NOT_FOUND)
def lookup_tiling(what: WorkloadQueryDep, lookup: LookupDep, misses: MissesDep) -> LookupPublic:
    """The tiling to launch ``op`` with for one shape: the tuned one (exact), the nearest tuned
    shape's re-derived for this shape when valid for it (nearest), else the op's default
    heuristic (default). Only tilings measured with the service host's toolchain answer, unless
    ``any_toolchain=true``. A shape answered without an exact entry is counted
    (``GET /v1/misses``)."""
    op, target = what.spec.name, what.target.name
    answer = lookup.lookup(op, target=target, dtype=what.dtype, shape=what.shape)
    if answer.source != "exact":
        misses.record(op, target, what.dtype, what.shape, answer.source)
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
    "/misses",
    response_model=MissList,
    responses={
        200: {
            "description": "The misses, or with format=manifest a tuning manifest of the "
            "untuned ones (weights: how often each was asked).",
            "content": {"application/json": {}},
        },
        404: {"description": "format=manifest, and no untuned shape was asked."},
    },
)
def list_misses(
    recorder: MissesDep,
    session: SessionDep,
    settings: SettingsDep,
    filters: TableFiltersDep,
    op: Annotated[str | None, Query(description="Only this op.")] = None,
    include_tuned: Annotated[
        bool, Query(description="Also shapes tuned since they were asked.")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    format: Annotated[Literal["json", "manifest"], Query()] = "json",
    budget: Annotated[int | None, Query(ge=1, description="format=manifest: per workload.")] = None,
    total_budget: Annotated[
        int | None, Query(ge=1, description="format=manifest: spread by weight.")
    ] = None,
) -> Any:
    """The shapes ``GET /v1/tilings`` answered without an exact entry, most asked first: by
    default those not tuned since. ``format=manifest``: a tuning manifest of them, weights =
    how often each was asked, for ``POST /v1/batches`` or ``tilewise tune-set``."""
    if op is not None:
        with blame("query", "op"):
            op = get_op(op).name
    if budget is not None and budget > settings.max_budget:  # POST /v1/batches would refuse it
        raise FieldError(
            ("query", "budget"),
            f"budget must be between 1 and {settings.max_budget}, got {budget}",
        )
    return missing.listing(
        session,
        recorder,
        op=op,
        target=filters.target,
        dtype=filters.dtype,
        include_tuned=include_tuned,
        limit=limit,
        manifest={"budget": budget, "total_budget": total_budget} if format == "manifest" else None,
    )


PortfolioQuery = Annotated[
    int | None,
    Query(
        ge=1,
        description="At most this many tilings per op, target and dtype, each tuned shape "
        "mapped to one (greedy set cover on the measured records), with a `portfolio` section "
        "naming them and the rule that chooses one per shape: `tilewise export --portfolio`.",
    ),
]
WithinQuery = Annotated[
    float | None,
    Query(
        ge=0,
        lt=1000,
        description="With portfolio: percent of a shape's tuned latency a member may take "
        "and still cover the shape (`tilewise export --within`; default 5).",
    ),
]


def _document(
    session: Session,
    *,
    op: str | None,
    filters: TableFilters,
    any_toolchain: bool,
    portfolio: int | None,
    within: float | None,
) -> dict[str, Any]:
    """The table document, or with ``portfolio`` the portfolio table ``tilewise export
    --portfolio K --within X`` writes (never measuring: the records' pairs only)."""
    if portfolio is None:
        if within is not None:
            raise FieldError(("query", "within"), "within goes with portfolio=K")
        return table_document(
            session, op=op, target=filters.target, dtype=filters.dtype, any_toolchain=any_toolchain
        )
    with blame("query", "portfolio"):
        doc, _ = portfolio_document(
            session,
            op=op,
            target=filters.target,
            dtype=filters.dtype,
            k=portfolio,
            within=(5.0 if within is None else within) / 100,
            any_toolchain=any_toolchain,
        )
    return doc


@router.get(
    "/tables",
    responses={200: {"description": "The tiling table document (format tilewise.tilings)."}},
)
def all_tables(
    session: SessionDep,
    filters: TableFiltersDep,
    format: Annotated[Literal["json"], Query()] = "json",
    any_toolchain: AnyToolchainQuery = False,
    portfolio: PortfolioQuery = None,
    within: WithinQuery = None,
) -> JSONResponse:
    """Every op's tiling table as one JSON document (what ``tilewise.runtime`` loads): the
    tilings of the service host's toolchain, unless ``any_toolchain=true``; with
    ``portfolio=K`` each op's portfolio table (``tilewise export OP --portfolio K``)."""
    return JSONResponse(
        _document(
            session,
            op=None,
            filters=filters,
            any_toolchain=any_toolchain,
            portfolio=portfolio,
            within=within,
        )
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
    any_toolchain: AnyToolchainQuery = False,
    portfolio: PortfolioQuery = None,
    within: WithinQuery = None,
) -> Response:
    """One op's tiling table: the JSON document, or the C header a host TilingFunc includes
    (the tilings of the service host's toolchain, unless ``any_toolchain=true``); with
    ``portfolio=K`` the portfolio table of ``tilewise export OP --portfolio K``, whose header
    also holds the members and the rule choosing one."""
    doc = _document(
        session,
        op=spec.name,
        filters=filters,
        any_toolchain=any_toolchain,
        portfolio=portfolio,
        within=within,
    )
    if format == "json":
        return JSONResponse(doc)
    return PlainTextResponse(
        render_header(doc, op=spec.name),
        media_type="text/x-c",
        headers={"Content-Disposition": f'attachment; filename="tilewise_{spec.name}.h"'},
    )
