"""Claims of tilings: which worker of a shared study measures a tiling now.

Several workers may tune one workload's study (a job's holder and its assistants, two tunes of
one workload). Before a worker builds a tiling it claims it: one insert keyed by (workload,
tiling) that takes the tiling or finds it taken, atomically, in whatever order the workers'
proposals arrive; the others leave the tiling to the claimant and await its record. The claim
ends in the transaction that adds the record, so the claims of a workload are its evaluations
in flight; a worker that claims a tiling after its record was added finds that record before it
builds (``tilewise.search._evaluate``). A claim older than an evaluation can take was left by a
worker that died mid-evaluation: the next worker to claim the tiling takes it over.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, or_, select, update
from sqlalchemy import func as sa_func
from sqlalchemy.orm import Session

from tilewise.store._coerce import conflict_insert, rowcount
from tilewise.store._models import TilingClaimModel, utcnow


def claim_tiling(
    session: Session,
    *,
    workload_id: int,
    tiling_key: str,
    claimant: str,
    stale_before: datetime,
    now: datetime | None = None,
) -> bool:
    """Take the tiling ``tiling_key`` of the workload for ``claimant`` to measure; whether it
    is ``claimant``'s now (claimed afresh, claimed by it before, or taken over from a claim made
    before ``stale_before``). On PostgreSQL a concurrent claim of the same tiling waits for the
    first one's transaction: commit right after."""
    now = now or utcnow()
    taken = session.scalar(
        conflict_insert(session)(TilingClaimModel)
        .values(workload_id=workload_id, tiling_key=tiling_key, claimant=claimant, claimed_at=now)
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
            or_(
                TilingClaimModel.claimant == claimant,
                TilingClaimModel.claimed_at < stale_before,
            ),
        )
        .values(claimant=claimant, claimed_at=now)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


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


def claims_in_flight(session: Session, *, workload_id: int, since: datetime) -> int:
    """The tilings of the workload claimed at or after ``since``: the evaluations its workers
    have in flight (older claims were left by workers that died)."""
    query = (
        select(sa_func.count())
        .select_from(TilingClaimModel)
        .where(TilingClaimModel.workload_id == workload_id, TilingClaimModel.claimed_at >= since)
    )
    return int(session.scalar(query) or 0)
