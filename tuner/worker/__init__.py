"""Workers: claim tuning jobs from the database, hold their lease, run their studies.

One worker serves one target (and device). It loops::

    claim the oldest claimable job of its target (queued, or running with an expired lease)
    build op spec / shape / target from the job's workload; refuse a stale op version
    run the study for the budget that is left, tagging its records with the job
    finish the job (succeeded / failed), or hand it back to the queue when asked to stop
    (no job to claim: assist a running job of its target, see below)

A heartbeat thread renews the lease every ``heartbeat_s`` and refreshes the worker's row (for
``GET /v1/workers``). The study stops asking for trials as soon as the lease is lost, the job
is cancelled, or the worker is asked to stop; the trial in flight always completes and is
recorded.

Assisting: a worker that finds no job to claim joins a running job of its target (the one with
the most evaluations left, with fewer than ``max_assistants_per_job`` assistants), registered
in ``tw_job_assists`` (:func:`tilewise.store.assist_job`). An assistant does not take the lease and
never finishes the job: it tunes the job's study (the tuners share it as any tuners of one
workload do, skipping tilings recorded or being measured elsewhere) until the job is no longer
running, its budget is spent, or the assistant is asked to stop. The holder re-measures and
stores the winner when the budget is spent, by whoever spent it.

Budget accounting: a record carries the job's id only if, at the end of the record's own
transaction, the job is running, its writer holds or assists it, and (for an evaluation) one
UPDATE of the job's row finds it has spent less than its budget and takes one more
(:func:`tilewise.store.tag_record`). So a job's spent evaluations are exactly its records
(:func:`tilewise.store.job_evaluations`, counted on its row too), never more than its budget,
and a job claimed again resumes with ``budget_evals`` minus those. The new worker's tuner sees
every earlier record and never measures a tiling again.
"""

from tilewise.worker._jobs import JobError, job_inputs, worker_id_for
from tilewise.worker._signals import (
    STOP_SIGNALS,
    block_stop_signals,
    stop_on_signals,
    unblock_stop_signals,
)
from tilewise.worker._worker import MAX_ATTEMPTS, PROGRESS_EVERY_S, Worker

__all__ = [
    "MAX_ATTEMPTS",
    "PROGRESS_EVERY_S",
    "STOP_SIGNALS",
    "JobError",
    "Worker",
    "block_stop_signals",
    "job_inputs",
    "stop_on_signals",
    "unblock_stop_signals",
    "worker_id_for",
]
