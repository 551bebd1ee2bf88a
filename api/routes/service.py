"""Targets, workers, health and metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from tilewise import store
from tilewise.api.deps import SessionDep, SettingsDep, StoreDep
from tilewise.api.metrics import CONTENT_TYPE, Metrics
from tilewise.api.schemas import HealthPublic, TargetPublic, WorkerPublic
from tilewise.errors import SchemaError
from tilewise.kernels.targets import list_targets

router = APIRouter(tags=["service"])

MAX_ALIVE_WITHIN_S = 10 * 365 * 24 * 3600.0


@router.get("/v1/targets", response_model=list[TargetPublic])
def get_targets() -> list[TargetPublic]:
    """Hardware profiles: core counts, on-chip memory sizes (bytes), clock and DDR rate."""
    return [TargetPublic.model_validate(t.to_dict()) for t in list_targets()]


@router.get("/v1/workers", response_model=list[WorkerPublic])
def get_workers(
    session: SessionDep,
    settings: SettingsDep,
    alive_within: Annotated[
        float | None,
        # Bounded: "now - alive_within" must stay a date (a huge value would be a 500); ten
        # years back already lists every worker ever seen.
        Query(
            gt=0, le=MAX_ALIVE_WITHIN_S, description="Only those heard from in the last N seconds."
        ),
    ] = None,
) -> list[WorkerPublic]:
    workers = store.list_workers(session, alive_within=alive_within)
    return [WorkerPublic.of(w, settings.lease_s) for w in workers]


@router.get(
    "/healthz",
    response_model=HealthPublic,
    responses={503: {"description": "Database unreachable or its schema not at head."}},
)
@router.head("/healthz", include_in_schema=False)  # load balancers probe with HEAD too
def healthz(db: StoreDep) -> HealthPublic:
    """Healthy when the database answers and its schema is at the revision this code needs."""
    revision = store.check_schema(db.engine)
    if revision is None:
        raise SchemaError(f"database {db.safe_url} has no tilewise schema")
    return HealthPublic(status="ok", database=db.engine.dialect.name, revision=revision)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE)
