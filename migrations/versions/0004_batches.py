"""batches: tuning manifests submitted as one batch (tw_batches, tw_batch_items)

Revision ID: 0004
Revises: 0003
Create Date: 2025-01-04 00:00:00

A batch is a manifest's workloads submitted at once (``POST /v1/batches``). Each item links a
workload to the job that tunes it, or to none when it was tuned already. A job may serve several
batches (the same workload asked by two builds while its job runs), so the link is an item
row, not a column of tw_jobs. New tables: nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def upgrade() -> None:
    op.create_table(
        "tw_batches",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("manifest", _json(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tw_batches"),
    )
    op.create_table(
        "tw_batch_items",
        sa.Column("batch_id", _id(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=True),
        sa.Column("job_id", _id(), nullable=True),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["tw_batches.id"], name="fk_tw_batch_items_batch_id_tw_batches"
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["tw_workloads.id"], name="fk_tw_batch_items_workload_id_tw_workloads"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["tw_jobs.id"], name="fk_tw_batch_items_job_id_tw_jobs"
        ),
        sa.PrimaryKeyConstraint("batch_id", "position", name="pk_tw_batch_items"),
    )


def downgrade() -> None:
    op.drop_table("tw_batch_items")
    op.drop_table("tw_batches")
