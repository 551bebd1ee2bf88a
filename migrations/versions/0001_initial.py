"""initial schema: workloads, records, tilings, jobs, workers

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00

Types are spelled out here rather than imported from tilewise.store: a revision must keep
creating the schema it created on the day it was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _status(table: str, *values: str) -> sa.Enum:
    # op.f(): the name is final, not to be run through the naming convention again.
    return sa.Enum(
        *values,
        name=op.f(f"ck_{table}_status"),
        native_enum=False,
        create_constraint=True,
        length=16,
    )


def upgrade() -> None:
    op.create_table(
        "tw_workloads",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(32), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("op_version", sa.String(64), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("shape", _json(), nullable=False),
        sa.Column("shape_key", sa.String(255), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tw_workloads"),
        sa.UniqueConstraint("key", name="uq_tw_workloads_key"),
    )
    op.create_index("ix_tw_workloads_op_target_dtype", "tw_workloads", ["op", "target", "dtype"])

    op.create_table(
        "tw_records",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column("tiling", _json(), nullable=False),
        sa.Column("tiling_key", sa.String(1024), nullable=False),
        sa.Column(
            "status",
            _status(
                "tw_records", "ok", "infeasible", "build_failed", "wrong", "crashed", "timeout"
            ),
            nullable=False,
        ),
        sa.Column("latency_us", sa.Double(), nullable=True),
        sa.Column("spread", sa.Double(), nullable=True),
        sa.Column("samples_us", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("constraints", _json(), nullable=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("env", _json(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.CheckConstraint(
            "(status = 'ok') = (latency_us IS NOT NULL)", name=op.f("ck_tw_records_latency_iff_ok")
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["tw_workloads.id"], name="fk_tw_records_workload_id_tw_workloads"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_tw_records"),
    )
    op.create_index("ix_tw_records_workload_id_status", "tw_records", ["workload_id", "status"])
    op.create_index(
        "ix_tw_records_workload_id_tiling_key", "tw_records", ["workload_id", "tiling_key"]
    )

    op.create_table(
        "tw_tilings",
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column("record_id", _id(), nullable=False),
        sa.Column("tiling", _json(), nullable=False),
        sa.Column("latency_us", sa.Double(), nullable=False),
        sa.Column("default_latency_us", sa.Double(), nullable=True),
        sa.Column("speedup", sa.Double(), nullable=True),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["tw_workloads.id"], name="fk_tw_tilings_workload_id_tw_workloads"
        ),
        sa.ForeignKeyConstraint(
            ["record_id"], ["tw_records.id"], name="fk_tw_tilings_record_id_tw_records"
        ),
        sa.PrimaryKeyConstraint("workload_id", name="pk_tw_tilings"),
    )

    op.create_table(
        "tw_jobs",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column(
            "status",
            _status("tw_jobs", "queued", "running", "succeeded", "failed", "cancelled"),
            nullable=False,
        ),
        sa.Column("budget_evals", sa.Integer(), nullable=False),
        sa.Column("budget_seconds", sa.Double(), nullable=True),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.Column("best_latency_us", sa.Double(), nullable=True),
        sa.Column("speedup", sa.Double(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(255), nullable=True),
        sa.Column("lease_until", _ts(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("finished_at", _ts(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["tw_workloads.id"], name="fk_tw_jobs_workload_id_tw_workloads"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_tw_jobs"),
    )
    op.create_index("ix_tw_jobs_status", "tw_jobs", ["status"])
    op.create_index("ix_tw_jobs_workload_id_status", "tw_jobs", ["workload_id", "status"])

    op.create_table(
        "tw_workers",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("device", sa.Integer(), nullable=True),
        sa.Column(
            "status",
            _status("tw_workers", "idle", "busy", "stopped"),
            nullable=False,
        ),
        sa.Column("started_at", _ts(), nullable=False),
        sa.Column("last_heartbeat", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tw_workers"),
    )


def downgrade() -> None:
    op.drop_table("tw_workers")
    op.drop_index("ix_tw_jobs_workload_id_status", table_name="tw_jobs")
    op.drop_index("ix_tw_jobs_status", table_name="tw_jobs")
    op.drop_table("tw_jobs")
    op.drop_table("tw_tilings")
    op.drop_index("ix_tw_records_workload_id_tiling_key", table_name="tw_records")
    op.drop_index("ix_tw_records_workload_id_status", table_name="tw_records")
    op.drop_table("tw_records")
    op.drop_index("ix_tw_workloads_op_target_dtype", table_name="tw_workloads")
    op.drop_table("tw_workloads")
