"""/v1/jobs: submit, read, list and cancel tuning jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status

from tilewise import store
from tilewise.api import jobs
from tilewise.api.deps import BodyKeysOnce, SessionDep, TuneRequestDep, WriteAuth, blame
from tilewise.api.schemas import JobList, JobPublic, TunedPublic
from tilewise.kernels.ops import get_op
from tilewise.store import JobStatus

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

# Ids are 64-bit integers in the database: a larger one would be a 500 on SQLite (OverflowError)
# and a 503 on PostgreSQL ("bigint out of range"): a 422 on the path instead.
JobId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The job's id.")]


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic | TunedPublic,
    responses={
        200: {"model": TunedPublic, "description": "Tuned already (and not forced)."},
        202: {"model": JobPublic, "description": "The job tuning it: new, or already active."},
        401: {"description": "Missing or wrong bearer token."},
        413: {"description": "Body too large."},
    },
)
def submit_job(
    _writer: WriteAuth,
    _keys: BodyKeysOnce,
    request: TuneRequestDep,
    session: SessionDep,
    response: Response,
) -> JobPublic | TunedPublic:
    """Tune a workload. Answers the stored result when it is tuned (unless ``force``), the
    active job when one is queued or running, otherwise a new queued job."""
    submitted = jobs.submit(session, request)
    if submitted.tuned is not None:
        response.status_code = status.HTTP_200_OK
        return submitted.tuned
    assert submitted.job is not None
    response.headers["Location"] = f"/v1/jobs/{submitted.job.id}"
    return submitted.job


@router.get("", response_model=JobList)
def list_jobs(
    session: SessionDep,
    status: Annotated[JobStatus | None, Query()] = None,
    op: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    """Jobs, newest first: at most ``limit`` of the ``total`` that match."""
    if op is not None:
        with blame("query", "op"):
            get_op(op)
    listed = jobs.listing(session, status=status, op=op, limit=limit)
    return JobList(jobs=listed, total=store.count_jobs(session, status=status, op=op))


@router.get("/{job_id}", response_model=JobPublic, responses={404: {"description": "No job."}})
def get_job(job_id: JobId, session: SessionDep) -> JobPublic:
    """A job's status, evaluations done of its budget, best so far, speedup and error."""
    return jobs.get(session, job_id)


@router.post(
    "/{job_id}/cancel", response_model=JobPublic, responses={404: {"description": "No job."}}
)
def cancel_job(_writer: WriteAuth, job_id: JobId, session: SessionDep) -> JobPublic:
    """Cancel a queued or running job (its worker stops at its next heartbeat); a finished job
    is returned unchanged."""
    return jobs.cancel(session, job_id)
