"""measured grids: choice grids decided by measuring, kept per op, target and dtype

Revision ID: 0009
Revises: 0008
Create Date: 2025-01-09 00:00:00

``tilewise export OP --measure`` decides each cell of a choice grid by measuring its candidates
against the default on the target: minutes of a device's time. The grid is kept here, with the
basis it was decided from (a hash of the group's tuned shapes, their tilings and toolchains), so
that later exports, the service and the runtime loaded from the database answer by it while
that basis holds. A new table: nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def upgrade() -> None:
    op.create_table(
        "tw_measured_grids",
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("op_version", sa.String(64), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("basis", sa.String(64), nullable=False),
        sa.Column("grid", _json(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("op", "op_version", "target", "dtype", name="pk_tw_measured_grids"),
    )


def downgrade() -> None:
    op.drop_table("tw_measured_grids")
