"""/v1/workloads/{key}: a workload's stored tilings (per toolchain) and history of winners;
/v1/workloads/{key}/records: its records, as JSON or as a space to replay."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from tilewise import store
from tilewise.api.deps import SessionDep, blame
from tilewise.api.detail import WorkloadDetailPublic, workload_detail
from tilewise.api.errors import NotFound
from tilewise.api.schemas import RecordsPublic
from tilewise.records import records_csv, records_document

router = APIRouter(prefix="/v1", tags=["workloads"])

WorkloadKey = Annotated[
    str,
    Path(
        description="The workload's key (`workload.key` in jobs, lookups and tables).",
        pattern="^[0-9a-f]{32}$",
    ),
]


@router.get(
    "/workloads/{key}",
    response_model=WorkloadDetailPublic,
    responses={404: {"description": "No workload has this key."}},
)
def workload_detail_route(key: WorkloadKey, session: SessionDep) -> WorkloadDetailPublic:
    """One workload: its stored winners, one per toolchain (the service host's is served; the
    others are stale, and say why), and the history of its winners (every change, with why)."""
    workload = store.find_workload(session, key=key)
    if workload is None:
        raise NotFound(f"no workload {key}")
    return workload_detail(session, workload)


@router.get(
    "/workloads/{key}/records",
    response_model=None,
    responses={
        200: {
            "model": RecordsPublic,
            "description": "JSON (every record), or with format=csv the measured tilings as a "
            "recorded space for `tilewise tune replay --space FILE.csv`.",
            "content": {"text/csv": {}},
        },
        404: {"description": "No workload has this key."},
    },
)
def workload_records(
    key: WorkloadKey,
    session: SessionDep,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Response:
    """Every record of one workload, oldest first: each tiling tried, its status, source and
    latency (the same document as ``tilewise records``)."""
    workload = store.find_workload(session, key=key)
    if workload is None:
        raise NotFound(f"no workload {key}")
    found = store.records_for(session, workload_id=workload.id)
    if format == "json":
        return JSONResponse(records_document(workload, found))
    with blame("query", "format"):  # nothing measured: no space to replay
        text = records_csv(workload, found)
    return PlainTextResponse(
        text,
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{workload.op}-{key}.csv"'},
    )
