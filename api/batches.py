"""Batches: a tuning manifest submitted at once (``POST /v1/batches``), and its progress.

Submitting a manifest, in one transaction:

1. its workloads are checked (:meth:`tilewise.manifest.Manifest.entries`; a bad one is a 422
   whose ``loc`` names it, e.g. ``["body", "workloads", 0, "shapes", 1]``) and committed;
2. the tuned ones are skipped (unless ``force``): item status ``tuned``, no job;
3. the budgets of the others are set (``budget``, or ``total_budget`` spread by weight over
   them, see :mod:`tilewise.manifest`);
4. each gets a job as ``POST /v1/jobs`` would give one (:mod:`tilewise.api.jobs`): the workload's
   queued or running job when there is one, else a new job. New jobs are queued heaviest weight
   first, so workers (which claim the oldest job first) tune what the application runs most
   first.

Two batches sharing workloads must not deadlock on PostgreSQL (they did, in the concurrency
test): a new workload's row is inserted in the order of the workload keys (a second inserter
of one key waits for the first to commit), and the rows are locked in id order before any job
is queued. SQLite serializes writers anyway.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.errors import FieldError, NotFound
from tilewise.api.jobs import ACTIVE
from tilewise.api.schemas import (
    BatchCreate,
    BatchItemPublic,
    BatchPublic,
    BatchStatus,
    BatchSummary,
    BatchTotals,
    WorkloadPublic,
)
from tilewise.kernels.backends import current_toolchain_id, current_toolchain_ids
from tilewise.manifest import ManifestError, assign_budgets
from tilewise.settings import Settings
from tilewise.store import BatchItemView, BatchRow


def submit(session: Session, body: BatchCreate, settings: Settings) -> BatchPublic:
    """Apply the submission steps of the module docstring; the new batch's view."""
    try:
        entries = body.entries(max_elements=settings.max_elements)
    except ManifestError as exc:
        raise FieldError(("body", *exc.loc), exc.reason) from exc
    if len(entries) > settings.max_batch_workloads:
        raise FieldError(
            ("body", "workloads"),
            f"{len(entries)} workloads in one batch; at most {settings.max_batch_workloads}"
            " (split the manifest)",
        )
    committed = {
        e.workload.key: store.commit_workload(session, e.workload)
        for e in sorted(entries, key=lambda e: e.workload.key)
    }
    rows = [committed[e.workload.key] for e in entries]
    tuned = [
        not body.force
        and store.get_tiling(session, workload_id=r.id, toolchain=current_toolchain_id(r.target))
        is not None
        for r in rows
    ]
    to_tune = [i for i, done in enumerate(tuned) if not done]
    try:
        budgets = assign_budgets(
            body,
            [entries[i].weight for i in to_tune],
            default=settings.default_budget,
            cap=settings.max_budget,
        )
    except ManifestError as exc:
        raise FieldError(("body", *exc.loc), exc.reason) from exc
    budget_of = dict(zip(to_tune, budgets, strict=True))
    for i in sorted(to_tune, key=lambda i: rows[i].id):
        store.lock_workload(session, workload_id=rows[i].id)
    job_of: dict[int, int] = {}
    for i in sorted(to_tune, key=lambda i: (-entries[i].weight, i)):
        active = store.list_jobs(session, workload_id=rows[i].id, status=ACTIVE, limit=1)
        if active:
            job_of[i] = active[0].id
        else:
            job_of[i] = store.create_job(
                session, workload_id=rows[i].id, budget_evals=budget_of[i], force=body.force
            ).id
    batch = store.create_batch(
        session, manifest=body.to_document(), name=body.name, force=body.force
    )
    for i, (entry, row) in enumerate(zip(entries, rows, strict=True)):
        store.add_batch_item(
            session,
            batch_id=batch.id,
            position=i,
            workload_id=row.id,
            weight=entry.weight,
            budget=budget_of.get(i),
            job_id=job_of.get(i),
        )
    return view(session, batch.id)


def _item(v: BatchItemView) -> BatchItemPublic:
    job, tiling = v.job, v.tiling
    return BatchItemPublic(
        position=v.item.position,
        workload=WorkloadPublic.of(v.workload),
        weight=v.item.weight,
        status="tuned" if job is None else job.status.value,
        job_id=None if job is None else job.id,
        budget=None if job is None else job.budget_evals,
        evaluations=0 if job is None else job.done_evals,
        best_latency_us=None if job is None else job.best_latency_us,
        latency_us=None if tiling is None else tiling.latency_us,
        default_latency_us=None if tiling is None else tiling.default_latency_us,
        speedup=None if tiling is None else tiling.speedup,
        error=None if job is None else job.error,
    )


def _summary(batch: BatchRow, items: list[BatchItemPublic]) -> BatchSummary:
    counts = Counter(i.status for i in items)
    totals = BatchTotals(
        workloads=len(items),
        tuned=counts["tuned"],
        queued=counts["queued"],
        running=counts["running"],
        succeeded=counts["succeeded"],
        failed=counts["failed"],
        cancelled=counts["cancelled"],
        budget=sum(i.budget or 0 for i in items),
        evaluations=sum(i.evaluations for i in items),
    )
    done = not (totals.queued or totals.running)
    status: BatchStatus
    if done:
        status = "failed" if totals.failed or totals.cancelled else "succeeded"
    else:
        started = totals.running or totals.succeeded or totals.failed or totals.cancelled
        status = "running" if started else "queued"
    return BatchSummary(
        id=batch.id,
        name=batch.name,
        status=status,
        done=done,
        force=batch.force,
        created_at=batch.created_at,
        totals=totals,
    )


def view(session: Session, batch_id: int) -> BatchPublic:
    batch = store.get_batch(session, batch_id=batch_id)
    if batch is None:
        raise NotFound(f"no batch {batch_id}")
    items = [_item(v) for v in _view(session, batch_id)]
    return BatchPublic(**_summary(batch, items).model_dump(), workloads=items)


def listing(session: Session, *, limit: int) -> list[BatchSummary]:
    return [
        _summary(batch, [_item(v) for v in _view(session, batch.id)])
        for batch in store.list_batches(session, limit=limit)
    ]


def _view(session: Session, batch_id: int) -> list[BatchItemView]:
    """The batch's items, each with the tiling of this host's toolchain for its target."""
    toolchains = current_toolchain_ids(store.workload_targets(session))
    return store.batch_view(session, batch_id=batch_id, toolchains=toolchains)
