"""tilewise's database: workloads, append-only records, the tiling table, jobs and workers.

Open a database with :func:`open_store` (a new one is migrated on first use; one at another
revision is refused with the command that fixes it), then work in :func:`session_scope` with
the repository functions::

    store = open_store("sqlite:///tilewise.db")
    with session_scope(store) as session:
        row = commit_workload(session, workload)
        add_record(session, workload_id=row.id, tiling=t, status=RecordStatus.OK,
                   latency_us=12.5, source=RecordSource.SEARCH, ...)

The repository functions are the only way tilewise reads and writes its tables. Every one takes
a :class:`~sqlalchemy.orm.Session` and keyword-only arguments, flushes but never commits (the
caller's ``session_scope`` does), and returns frozen ``*Row`` values that stay valid after the
session is closed. "Now" is this host's UTC clock (``now=`` overrides it, for tests). They live
in one module per aggregate: workloads and records, toolchains, the tiling table (one
winner per workload and toolchain, and the history of winners), jobs and their leases, a
job's evaluations and assistants, which worker measures a tiling of a shared study (claims),
batches of jobs (a submitted manifest), workers, and the shapes the service answered without
an exact entry (misses).

Optuna's RDB storage may share the database: our tables are ``tw_*`` and our Alembic version
table is ``tilewise_alembic_version``.
"""

from tilewise.status import JobStatus, RecordSource, RecordStatus, WorkerStatus
from tilewise.store._assists import (
    assist_job,
    end_assist,
    job_assistants,
    job_evaluations,
    job_spent,
    renew_assist,
    tag_record,
)
from tilewise.store._batches import (
    BatchItemRow,
    BatchItemView,
    BatchRow,
    add_batch_item,
    batch_view,
    create_batch,
    get_batch,
    list_batches,
)
from tilewise.store._claims import (
    claim_tiling,
    claimant_of,
    claims_in_flight,
    claims_named,
    release_claim,
    release_worker_claims,
)
from tilewise.store._engine import (
    VERSION_TABLE,
    Store,
    check_persistent,
    check_schema,
    create_engine,
    current_revision,
    head_revision,
    is_missing_file,
    migrate,
    open_store,
    optuna_engine_kwargs,
    safe_url,
    session_scope,
)
from tilewise.store._grids import measured_grid, save_measured_grid
from tilewise.store._jobs import (
    JobRow,
    cancel_job,
    claim_job,
    count_jobs,
    count_jobs_by_status,
    create_job,
    finish_job,
    get_job,
    holds_job,
    job_time_by_target,
    list_jobs,
    queued_jobs_by_target,
    release_job,
    renew_lease,
    update_job_progress,
)
from tilewise.store._misses import MissRow, list_misses, record_misses
from tilewise.store._records import (
    SOURCE_PREDICTED,
    SOURCE_REMEASURE,
    RecordRow,
    WorkloadRow,
    add_record,
    commit_workload,
    count_evaluations_by_status,
    count_workloads,
    find_record,
    find_workload,
    get_workload,
    lock_workload,
    records_for,
    workload_targets,
)
from tilewise.store._tilings import (
    TilingRow,
    WinnerRow,
    best_tilings,
    count_tilings,
    get_tiling,
    tiling_table_fingerprint,
    tilings_of,
    top_k,
    upsert_tiling,
    winner_history,
)
from tilewise.store._toolchains import commit_toolchain
from tilewise.store._workers import (
    WorkerRow,
    heartbeat_worker,
    list_workers,
)

__all__ = [
    "SOURCE_PREDICTED",
    "SOURCE_REMEASURE",
    "VERSION_TABLE",
    "BatchItemRow",
    "BatchItemView",
    "BatchRow",
    "JobRow",
    "JobStatus",
    "MissRow",
    "RecordRow",
    "RecordSource",
    "RecordStatus",
    "Store",
    "TilingRow",
    "WinnerRow",
    "WorkerRow",
    "WorkerStatus",
    "WorkloadRow",
    "add_batch_item",
    "add_record",
    "assist_job",
    "batch_view",
    "best_tilings",
    "cancel_job",
    "check_persistent",
    "check_schema",
    "claim_job",
    "claim_tiling",
    "claimant_of",
    "claims_in_flight",
    "claims_named",
    "commit_toolchain",
    "commit_workload",
    "count_evaluations_by_status",
    "count_jobs",
    "count_jobs_by_status",
    "count_tilings",
    "count_workloads",
    "create_batch",
    "create_engine",
    "create_job",
    "current_revision",
    "end_assist",
    "find_record",
    "find_workload",
    "finish_job",
    "get_batch",
    "get_job",
    "get_tiling",
    "get_workload",
    "head_revision",
    "heartbeat_worker",
    "holds_job",
    "is_missing_file",
    "job_assistants",
    "job_evaluations",
    "job_spent",
    "job_time_by_target",
    "list_batches",
    "list_jobs",
    "list_misses",
    "list_workers",
    "lock_workload",
    "measured_grid",
    "migrate",
    "open_store",
    "optuna_engine_kwargs",
    "queued_jobs_by_target",
    "record_misses",
    "records_for",
    "release_claim",
    "release_job",
    "release_worker_claims",
    "renew_assist",
    "renew_lease",
    "safe_url",
    "save_measured_grid",
    "session_scope",
    "tag_record",
    "tiling_table_fingerprint",
    "tilings_of",
    "top_k",
    "update_job_progress",
    "upsert_tiling",
    "winner_history",
    "workload_targets",
]
