"""jobs: workers assisting a running job (tw_job_assists)

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03 00:00:00

An idle worker may assist a running job: it tunes the job's study without holding the lease.
One row per (job, assistant), its heartbeat refreshed while it assists. A record counts for a job
only if its writer is the job's holder or has a row here (checked with the job row locked, in the
record's own transaction), so a job's evaluations stay exact. A new table: nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tw_job_assists",
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("worker_id", sa.String(255), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["tw_jobs.id"], name="fk_tw_job_assists_job_id_tw_jobs"
        ),
        sa.PrimaryKeyConstraint("job_id", "worker_id", name="pk_tw_job_assists"),
    )


def downgrade() -> None:
    op.drop_table("tw_job_assists")
