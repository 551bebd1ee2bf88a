"""/v1/batches: a tuning manifest submitted as one batch, and its progress."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from tilewise.api import batches
from tilewise.api.deps import BodyKeysOnce, SessionDep, SettingsDep, WriteAuth
from tilewise.api.schemas import BatchCreate, BatchList, BatchPublic

router = APIRouter(prefix="/v1/batches", tags=["batches"])

BatchId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The batch's id.")]


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BatchPublic,
    responses={
        401: {"description": "Missing or wrong bearer token."},
        413: {"description": "Body too large (settings.max_batch_bytes)."},
    },
)
def submit_batch(
    _writer: WriteAuth,
    _keys: BodyKeysOnce,
    body: BatchCreate,
    session: SessionDep,
    settings: SettingsDep,
    response: Response,
) -> BatchPublic:
    """Tune a manifest's workloads: the tuned ones are skipped (unless ``force``), each other
    one gets a job (its active job when it has one). ``GET /v1/batches/{id}`` follows them."""
    batch = batches.submit(session, body, settings)
    response.headers["Location"] = f"/v1/batches/{batch.id}"
    return batch


@router.get("", response_model=BatchList)
def list_batches(
    session: SessionDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> BatchList:
    """Batches, newest first, with their totals."""
    return BatchList(batches=batches.listing(session, limit=limit))


@router.get(
    "/{batch_id}", response_model=BatchPublic, responses={404: {"description": "No batch."}}
)
def get_batch(batch_id: BatchId, session: SessionDep) -> BatchPublic:
    """A batch's status and totals, and each workload's status, evaluations, result and error."""
    return batches.view(session, batch_id)
