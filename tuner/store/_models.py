"""SQLAlchemy models of tilewise's own tables.

Every table is named ``tw_*`` because Optuna's RDB storage lives in the same database with
unprefixed names (``studies``, ``trials``, ``version_info``, ...) and its own ``alembic_version``
table. The schema is owned by the Alembic revisions in ``migrations/versions``; these models must
match them (a test compares the two on SQLite and PostgreSQL).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from tilewise.status import JobStatus, RecordStatus, WorkerStatus
from tilewise.types import UNKNOWN_TOOLCHAIN

#: Deterministic constraint names, so later migrations (and SQLite batch mode) can address them.
NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always tz-aware UTC in Python.

    SQLite has no time zones: values are stored as naive UTC text there (which also keeps the
    text comparisons used for leases correct), and read back as aware UTC.
    """

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: tilewise stores tz-aware UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def json_type() -> TypeEngine[Any]:
    # none_as_null: Python None must be SQL NULL, not the JSON text 'null', so that
    # "IS NULL" means "absent". JSONB on PostgreSQL for indexable, comparable values.
    return JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def id_type() -> TypeEngine[int]:
    # SQLite only auto-increments an INTEGER PRIMARY KEY, PostgreSQL rows may exceed 2**31.
    return BigInteger().with_variant(Integer(), "sqlite")


def _enum(cls: type[RecordStatus] | type[JobStatus] | type[WorkerStatus], name: str) -> Enum:
    # Stored as VARCHAR + CHECK (not a native PostgreSQL ENUM): simpler to migrate, same on
    # every database.
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class WorkloadModel(Base):
    __tablename__ = "tw_workloads"
    __table_args__ = (Index("ix_tw_workloads_op_target_dtype", "op", "target", "dtype"),)

    id: Mapped[int] = mapped_column(id_type(), primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(32), unique=True)
    op: Mapped[str] = mapped_column(String(64))
    op_version: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    shape: Mapped[dict[str, int]] = mapped_column(json_type())
    shape_key: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RecordModel(Base):
    """One measured (or rejected) tiling of a workload. Append-only."""

    __tablename__ = "tw_records"
    __table_args__ = (
        Index("ix_tw_records_workload_id_status", "workload_id", "status"),
        Index("ix_tw_records_workload_id_tiling_key", "workload_id", "tiling_key"),
        Index("ix_tw_records_job_id", "job_id"),
        CheckConstraint("(status = 'ok') = (latency_us IS NOT NULL)", name="latency_iff_ok"),
    )

    id: Mapped[int] = mapped_column(id_type(), primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"))
    tiling: Mapped[dict[str, int]] = mapped_column(json_type())
    tiling_key: Mapped[str] = mapped_column(String(1024))
    status: Mapped[RecordStatus] = mapped_column(_enum(RecordStatus, "status"))
    latency_us: Mapped[float | None] = mapped_column(Double())
    spread: Mapped[float | None] = mapped_column(Double())
    samples_us: Mapped[list[float] | None] = mapped_column(json_type())
    error: Mapped[str | None] = mapped_column(Text())
    constraints: Mapped[dict[str, float] | None] = mapped_column(json_type())
    source: Mapped[str] = mapped_column(String(32))
    trial_number: Mapped[int | None] = mapped_column(Integer())
    env: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The job whose worker measured it, set only while that worker held the job's lease: a
    # job's evaluations are its records. No foreign key: adding one to SQLite rebuilds the
    # table, and records are never deleted with their job (jobs are never deleted at all).
    job_id: Mapped[int | None] = mapped_column(id_type())
    # The toolchain that measured it (a tw_toolchains id). No foreign key, for the same reason;
    # records of databases older than toolchains hold 'unknown'.
    toolchain: Mapped[str] = mapped_column(String(16), server_default=UNKNOWN_TOOLCHAIN)


class ToolchainModel(Base):
    """A toolchain that measured something: compiler, twin headers or CANN, target profile."""

    __tablename__ = "tw_toolchains"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    backend: Mapped[str] = mapped_column(String(32))
    compiler: Mapped[str] = mapped_column(String(64))
    headers: Mapped[str] = mapped_column(String(64))
    profile: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TilingModel(Base):
    """The tiling table: the chosen tiling per workload and toolchain. The only upserted table.

    Keyed by toolchain too: a tune after an upgrade (compiler, twin headers, CANN, target
    profile) stores its own winner, and the old one stays, stale, for who asks for any.
    """

    __tablename__ = "tw_tilings"

    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"), primary_key=True)
    toolchain: Mapped[str] = mapped_column(ForeignKey("tw_toolchains.id"), primary_key=True)
    record_id: Mapped[int] = mapped_column(ForeignKey("tw_records.id"))
    tiling: Mapped[dict[str, int]] = mapped_column(json_type())
    latency_us: Mapped[float] = mapped_column(Double())
    default_latency_us: Mapped[float | None] = mapped_column(Double())
    speedup: Mapped[float | None] = mapped_column(Double())
    evaluations: Mapped[int] = mapped_column(Integer())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WinnerHistoryModel(Base):
    """Every change of a stored winner (tw_tilings), appended in the change's transaction."""

    __tablename__ = "tw_winner_history"
    __table_args__ = (Index("ix_tw_winner_history_workload_id", "workload_id"),)

    id: Mapped[int] = mapped_column(id_type(), primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"))
    toolchain: Mapped[str] = mapped_column(ForeignKey("tw_toolchains.id"))
    record_id: Mapped[int] = mapped_column(ForeignKey("tw_records.id"))
    tiling: Mapped[dict[str, int]] = mapped_column(json_type())
    latency_us: Mapped[float] = mapped_column(Double())
    default_latency_us: Mapped[float | None] = mapped_column(Double())
    speedup: Mapped[float | None] = mapped_column(Double())
    reason: Mapped[str] = mapped_column(Text())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class JobModel(Base):
    __tablename__ = "tw_jobs"
    __table_args__ = (
        Index("ix_tw_jobs_status", "status"),
        Index("ix_tw_jobs_workload_id_status", "workload_id", "status"),
    )

    id: Mapped[int] = mapped_column(id_type(), primary_key=True, autoincrement=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"))
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus, "status"))
    budget_evals: Mapped[int] = mapped_column(Integer())
    budget_seconds: Mapped[float | None] = mapped_column(Double())
    force: Mapped[bool] = mapped_column(Boolean(create_constraint=False), default=False)
    seed: Mapped[int | None] = mapped_column(BigInteger())
    evaluations: Mapped[int] = mapped_column(Integer(), default=0)
    # The evaluations its records spent, taken one by one as each is tagged with the job (see
    # tilewise.store.tag_record): never above budget_evals, always its evaluation records' count.
    spent_evals: Mapped[int] = mapped_column(Integer(), default=0, server_default="0")
    best_latency_us: Mapped[float | None] = mapped_column(Double())
    speedup: Mapped[float | None] = mapped_column(Double())
    attempts: Mapped[int] = mapped_column(Integer(), default=0)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class JobAssistModel(Base):
    """A worker assisting a running job: it tunes the job's study without holding its lease.

    Its records count for the job (see ``tilewise.store.tag_record``) while its row is here;
    ``heartbeat_at`` is refreshed while it assists, and a row older than a lease is stale
    (removed by the next assistant of the job). Each assistant takes one of the job's numbered
    ``slot``s, below ``max_assistants_per_job``: the unique (job, slot) is what keeps a job's
    assistants within that number, without locking the job's row.
    """

    __tablename__ = "tw_job_assists"
    __table_args__ = (UniqueConstraint("job_id", "slot"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("tw_jobs.id"), primary_key=True)
    worker_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    slot: Mapped[int] = mapped_column(Integer())


class WorkerModel(Base):
    __tablename__ = "tw_workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # "host:pid:target:device"
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer())
    target: Mapped[str] = mapped_column(String(64))
    device: Mapped[int | None] = mapped_column(Integer())
    status: Mapped[WorkerStatus] = mapped_column(_enum(WorkerStatus, "status"))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BatchModel(Base):
    """A tuning manifest submitted as one batch: its workloads are :class:`BatchItemModel`."""

    __tablename__ = "tw_batches"

    id: Mapped[int] = mapped_column(id_type(), primary_key=True, autoincrement=True)
    name: Mapped[str | None] = mapped_column(String(200))
    force: Mapped[bool] = mapped_column(Boolean(create_constraint=False), default=False)
    # The manifest as submitted (its short form): what was asked, for the record.
    manifest: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BatchItemModel(Base):
    """One workload of a batch: the job that tunes it, or none when it was tuned already.

    A job may serve several batches (one that was queued or running when a batch asked for the
    same workload), so the link lives here, not on the job.
    """

    __tablename__ = "tw_batch_items"

    batch_id: Mapped[int] = mapped_column(ForeignKey("tw_batches.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer(), primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"))
    weight: Mapped[float] = mapped_column(Double())
    # The evaluations the batch gave it (None: tuned already, no job). A job that was already
    # active for the workload keeps its own budget.
    budget: Mapped[int | None] = mapped_column(Integer())
    job_id: Mapped[int | None] = mapped_column(ForeignKey("tw_jobs.id"))


class MissModel(Base):
    """A shape the service answered without an exact entry, and how often it was asked."""

    __tablename__ = "tw_misses"

    op: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(64), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(16), primary_key=True)
    shape_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    shape: Mapped[dict[str, int]] = mapped_column(json_type())
    count: Mapped[int] = mapped_column(BigInteger())
    source: Mapped[str] = mapped_column(String(16))  # the rule of the latest answer
    first_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class MeasuredGridModel(Base):
    """A choice grid decided by measuring (``tilewise export --measure``), with the basis it was
    decided from: used while the group's tuned shapes, tilings and toolchains hash to it."""

    __tablename__ = "tw_measured_grids"

    op: Mapped[str] = mapped_column(String(64), primary_key=True)
    op_version: Mapped[str] = mapped_column(String(64), primary_key=True)
    target: Mapped[str] = mapped_column(String(64), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(16), primary_key=True)
    basis: Mapped[str] = mapped_column(String(64))
    grid: Mapped[dict[str, Any]] = mapped_column(json_type())
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TilingClaimModel(Base):
    """A tiling of a workload that one worker is measuring (``tilewise.store.claim_tiling``):
    the workers sharing the workload's study leave it to that worker. Deleted with the record's
    insert; one left by a worker that died mid-evaluation is told by its worker's heartbeat, or
    by ``claimed_at``."""

    __tablename__ = "tw_tiling_claims"

    workload_id: Mapped[int] = mapped_column(ForeignKey("tw_workloads.id"), primary_key=True)
    tiling_key: Mapped[str] = mapped_column(String(1024), primary_key=True)
    claimant: Mapped[str] = mapped_column(String(255))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    worker_id: Mapped[str | None] = mapped_column(String(255))  # a worker's (tw_workers.id)


#: Our tables: what migrations manage and what "does the schema exist" looks for.
TABLE_NAMES: frozenset[str] = frozenset(Base.metadata.tables)
