"""jobs: the evaluations a job spent, counted on its row (tw_jobs.spent_evals)

Revision ID: 0007
Revises: 0006
Create Date: 2025-01-07 00:00:00

A job's holder and its assistants tag their records with the job one at a time, so that the job
never spends more than its budget. Until now each record's transaction locked the job's row, then
counted the job's records, then inserted its own, and held the lock to its commit: with many
workers assisting one job they queued on that lock. Now the record is inserted first and its
transaction ends with one UPDATE that takes an evaluation from the budget (``spent_evals <
budget_evals``), so the row is locked only from that statement to the commit.

Existing jobs get the count of their evaluation records (neither rejected before a build nor
re-measures), which is what the column holds from now on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tw_jobs", sa.Column("spent_evals", sa.Integer(), nullable=False, server_default="0")
    )
    jobs = sa.table("tw_jobs", sa.column("id"), sa.column("spent_evals"))
    records = sa.table("tw_records", sa.column("job_id"), sa.column("status"), sa.column("source"))
    spent = (
        sa.select(sa.func.count())
        .select_from(records)
        .where(
            records.c.job_id == jobs.c.id,
            records.c.status != "infeasible",
            records.c.source != "remeasure",
        )
        .scalar_subquery()
    )
    op.execute(jobs.update().values(spent_evals=spent))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite >= 3.35), not a batch rebuild that could lose constraints.
    op.drop_column("tw_jobs", "spent_evals")
