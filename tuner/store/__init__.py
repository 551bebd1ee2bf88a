"""tilewise's database: workloads, append-only records, the tiling table, jobs and workers.

Open a database with :func:`open_store` (a new one is migrated on first use; one at another
revision is refused with the command that fixes it), then work in :func:`session_scope` with
the repository functions::

    store = open_store("sqlite:///tilewise.db")
    with session_scope(store) as session:
        row = commit_workload(session, workload)
        add_record(session, workload_id=row.id, tiling=t, status="ok", latency_us=12.5, ...)

Optuna's RDB storage may share the database: our tables are ``tw_*`` and our Alembic version
table is ``tilewise_alembic_version``.
"""

from tilewise.status import JobStatus, RecordSource, RecordStatus, WorkerStatus
from tilewise.store._engine import (
    VERSION_TABLE,
    Store,
    check_schema,
    create_engine,
    current_revision,
    head_revision,
    migrate,
    open_store,
    optuna_engine_kwargs,
    safe_url,
    session_scope,
)
from tilewise.store._repo import (
    SOURCE_PREDICTED,
    SOURCE_REMEASURE,
    JobRow,
    RecordRow,
    TilingRow,
    WorkerRow,
    WorkloadRow,
    add_record,
    assist_job,
    best_tilings,
    cancel_job,
    claim_job,
    commit_workload,
    create_job,
    end_assist,
    find_record,
    find_workload,
    finish_job,
    get_job,
    get_tiling,
    get_workload,
    heartbeat_worker,
    holds_job,
    job_assistants,
    job_evaluations,
    list_jobs,
    list_workers,
    may_tag_record,
    records_for,
    release_job,
    renew_assist,
    renew_lease,
    top_k,
    update_job_progress,
    upsert_tiling,
)

__all__ = [
    "SOURCE_PREDICTED",
    "SOURCE_REMEASURE",
    "VERSION_TABLE",
    "JobRow",
    "JobStatus",
    "RecordRow",
    "RecordSource",
    "RecordStatus",
    "Store",
    "TilingRow",
    "WorkerRow",
    "WorkerStatus",
    "WorkloadRow",
    "add_record",
    "assist_job",
    "best_tilings",
    "cancel_job",
    "check_schema",
    "claim_job",
    "commit_workload",
    "create_engine",
    "create_job",
    "current_revision",
    "end_assist",
    "find_record",
    "find_workload",
    "finish_job",
    "get_job",
    "get_tiling",
    "get_workload",
    "head_revision",
    "heartbeat_worker",
    "holds_job",
    "job_assistants",
    "job_evaluations",
    "list_jobs",
    "list_workers",
    "may_tag_record",
    "migrate",
    "open_store",
    "optuna_engine_kwargs",
    "records_for",
    "release_job",
    "renew_assist",
    "renew_lease",
    "safe_url",
    "session_scope",
    "top_k",
    "update_job_progress",
    "upsert_tiling",
]
