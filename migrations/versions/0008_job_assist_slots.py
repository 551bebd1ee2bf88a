"""jobs: an assistant takes one of its job's numbered slots (tw_job_assists.slot)

Revision ID: 0008
Revises: 0007
Create Date: 2025-01-08 00:00:00

A job takes at most ``max_assistants_per_job`` assistants. Until now a worker registering as an
assistant locked the job's row, counted its live assistants and inserted its own row: with many
workers registering at once they queued on that lock (64 workers on one job waited 130 s in all
for it). Now each assistant's row holds a slot below that number, unique per job, and a
registration is one insert that either takes a free slot or finds it taken: the unique index
keeps the number, and no row is locked.

Existing registrations get the slots 0, 1, ... of their job in the order of their workers' ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tw_job_assists", sa.Column("slot", sa.Integer(), nullable=True))
    assists = sa.table(
        "tw_job_assists", sa.column("job_id"), sa.column("worker_id"), sa.column("slot")
    )
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(assists.c.job_id, assists.c.worker_id).order_by(
            assists.c.job_id, assists.c.worker_id
        )
    ).all()
    slots: dict[int, int] = {}
    for job_id, worker_id in rows:
        slot = slots[job_id] = slots.get(job_id, -1) + 1
        bind.execute(
            assists.update()
            .where(assists.c.job_id == job_id, assists.c.worker_id == worker_id)
            .values(slot=slot)
        )
    with op.batch_alter_table("tw_job_assists") as batch:
        batch.alter_column("slot", existing_type=sa.Integer(), nullable=False)
        batch.create_unique_constraint("uq_tw_job_assists_job_id", ["job_id", "slot"])


def downgrade() -> None:
    with op.batch_alter_table("tw_job_assists") as batch:
        batch.drop_constraint("uq_tw_job_assists_job_id", type_="unique")
        batch.drop_column("slot")
