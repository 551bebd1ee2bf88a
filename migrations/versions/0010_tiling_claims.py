"""claims: a tiling of a shared study taken by one worker before it is measured (tw_tiling_claims)

Revision ID: 0010
Revises: 0009
Create Date: 2025-01-10 00:00:00

Several workers may tune one workload's study (a job's holder and its assistants). Until now a
worker that had a tiling proposed looked for an older running trial of the same tiling in the
study and gave way to it; as a trial's parameters are written one by one after the trial is
created, it had to wait for older trials still being proposed (an assistant among 64 on one job
spent a tenth of its time in that wait). Now the worker claims the tiling: one insert keyed by
(workload, tiling) that either takes it or finds it taken, atomically, whatever the order of the
trials. A new table: nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tw_tiling_claims",
        sa.Column(
            "workload_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("tiling_key", sa.String(1024), nullable=False),
        sa.Column("claimant", sa.String(255), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("worker_id", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["tw_workloads.id"],
            name="fk_tw_tiling_claims_workload_id_tw_workloads",
        ),
        sa.PrimaryKeyConstraint("workload_id", "tiling_key", name="pk_tw_tiling_claims"),
    )


def downgrade() -> None:
    op.drop_table("tw_tiling_claims")
