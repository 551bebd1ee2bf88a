"""records: the job that measured them (tw_records.job_id)

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02 00:00:00

A job's evaluations are counted from its records, so a job re-claimed after its worker died
resumes with exactly the budget that is left. A plain nullable column (no foreign key), so
SQLite adds it with ALTER TABLE instead of rebuilding the append-only records table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tw_records",
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
    )
    op.create_index("ix_tw_records_job_id", "tw_records", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_tw_records_job_id", table_name="tw_records")
    # A plain DROP COLUMN (SQLite >= 3.35), not a batch rebuild that could lose constraints.
    op.drop_column("tw_records", "job_id")
