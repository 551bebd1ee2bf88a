"""Claims of tilings: which worker of a shared study measures a tiling now.

Several workers may tune one workload's study (a job's holder and its assistants, two tunes of
one workload). Before a worker builds a tiling it claims it: one insert keyed by (workload,
tiling) that takes the tiling or finds it taken, atomically, in whatever order the workers'
proposals arrive; the others leave the tiling to the claimant and await its record. The claim
ends in the transaction that adds the record, so the live claims of a workload are its
evaluations in flight; a worker that claims a tiling after its record was added finds that
record before it builds (``tilewise.search._evaluate``).

A claim is live while its worker is (a heartbeat within a lease, for a claim that names one in
``tw_workers``) and for at most one evaluation's bound. One that is not was left by a worker
that died mid-evaluation: the next worker to claim the tiling takes it over, and it is not in
flight.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, exists, select, update
from sqlalchemy import func as sa_func
from sqlalchemy.orm import Session

from tilewise.store._coerce import conflict_insert, rowcount
from tilewise.store._models import TilingClaimModel, WorkerModel, utcnow


def _live(since: datetime, alive_since: datetime) -> Any:
    # Made at or after ``since``, by a worker with a heartbeat at or after ``alive_since`` (or
    # none on record: a tune outside a worker).
    dead = exists().where(
        WorkerModel.id == TilingClaimModel.worker_id, WorkerModel.last_heartbeat < alive_since
    )
    return and_(TilingClaimModel.claimed_at >= since, ~dead)


def claim_tiling(
    session: Session,
    *,
    workload_id: int,
    tiling_key: str,
    claimant: str,
    worker_id: str | None,
    since: datetime,
    alive_since: datetime,
    now: datetime | None = None,
) -> bool:
    """Take the tiling ``tiling_key`` of the workload for ``claimant`` (of the worker
    ``worker_id``, if any) to measure; whether it is ``claimant``'s now: claimed afresh,
    claimed by it before, or taken over from a claim that is not live (see the module
    docstring; ``since``: one evaluation's bound ago, ``alive_since``: a lease ago). On
    PostgreSQL a concurrent claim of the same tiling waits for the first one's transaction:
    commit right after."""
    now = now or utcnow()
    taken = session.scalar(
        conflict_insert(session)(TilingClaimModel)
        .values(
            workload_id=workload_id,
            tiling_key=tiling_key,
            claimant=claimant,
            claimed_at=now,
            worker_id=worker_id,
        )
        .on_conflict_do_nothing()
        .returning(TilingClaimModel.claimant)
    )
    if taken is not None:
        return True
    result = session.execute(
        update(TilingClaimModel)
        .where(
            TilingClaimModel.workload_id == workload_id,
            TilingClaimModel.tiling_key == tiling_key,
            (TilingClaimModel.claimant == claimant) | ~_live(since, alive_since),
        )
        .values(claimant=claimant, claimed_at=now, worker_id=worker_id)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def release_worker_claims(session: Session, *, workload_id: int, worker_id: str) -> int:
    """End the claims of the workload that the worker ``worker_id`` holds: a worker evaluates
    one tiling at a time, so when it starts on a workload again its earlier claims there are of
    evaluations it abandoned (its database connection lost mid-trial, the job handed back).
    Live by :func:`claim_tiling`'s rule (its heartbeat goes on), they would otherwise hold
    their tilings, and the job's budget, for an evaluation's bound. The number ended."""
    result = session.execute(
        delete(TilingClaimModel)
        .where(
            TilingClaimModel.workload_id == workload_id,
            TilingClaimModel.worker_id == worker_id,
        )
        .execution_options(synchronize_session=False)
    )
    return rowcount(result)


def release_claim(session: Session, *, workload_id: int, tiling_key: str, claimant: str) -> None:
    """End ``claimant``'s claim of a tiling: in the transaction that adds its record, or when
    its evaluation failed without one (another worker may claim it at once)."""
    session.execute(
        delete(TilingClaimModel)
        .where(
            TilingClaimModel.workload_id == workload_id,
            TilingClaimModel.tiling_key == tiling_key,
            TilingClaimModel.claimant == claimant,
        )
        .execution_options(synchronize_session=False)
    )


def claims_in_flight(
    session: Session, *, workload_id: int, since: datetime, alive_since: datetime
) -> int:
    """The live claims of the workload (see :func:`claim_tiling`): the evaluations its workers
    have in flight."""
    query = (
        select(sa_func.count())
        .select_from(TilingClaimModel)
        .where(TilingClaimModel.workload_id == workload_id, _live(since, alive_since))
    )
    return int(session.scalar(query) or 0)


def claims_named(session: Session, *, workload_id: int, prefix: str) -> list[tuple[str, str]]:
    """(tiling key, claimant) of the workload's claims whose claimant starts with ``prefix``."""
    rows = session.execute(
        select(TilingClaimModel.tiling_key, TilingClaimModel.claimant).where(
            TilingClaimModel.workload_id == workload_id,
            TilingClaimModel.claimant.startswith(prefix, autoescape=True),
        )
    )
    return [(key, claimant) for key, claimant in rows]


def claimant_of(session: Session, *, workload_id: int, tiling_key: str) -> str | None:
    """Who claims the tiling now; None when nobody does."""
    return session.scalar(
        select(TilingClaimModel.claimant).where(
            TilingClaimModel.workload_id == workload_id,
            TilingClaimModel.tiling_key == tiling_key,
        )
    )
