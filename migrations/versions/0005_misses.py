"""misses: shapes the service answered without an exact entry (tw_misses)

Revision ID: 0005
Revises: 0004
Create Date: 2025-01-05 00:00:00

``GET /v1/tilings`` counts in memory the shapes it answered with a nearest or default tiling and
adds the counts here in batches (one upsert per shape and flush, not a write per request).
``GET /v1/misses`` and ``tilewise misses`` turn them into a tuning manifest. A new table:
nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def upgrade() -> None:
    op.create_table(
        "tw_misses",
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("shape_key", sa.String(255), nullable=False),
        sa.Column("shape", _json(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("op", "target", "dtype", "shape_key", name="pk_tw_misses"),
    )


def downgrade() -> None:
    op.drop_table("tw_misses")
