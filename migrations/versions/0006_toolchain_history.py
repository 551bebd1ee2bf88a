"""toolchains: what measured each record and stored tiling; the history of stored winners

Revision ID: 0006
Revises: 0005
Create Date: 2025-01-06 00:00:00

A timing holds for one toolchain: the compiler, the twin headers (or the CANN version) and the
target profile. tw_toolchains names each one; every record carries its toolchain, and the tiling
table is keyed by (workload, toolchain), so a tune after an upgrade stores its own winner while
the old one stays, stale. tw_winner_history gets a row for every change of a stored winner.

Existing rows get the toolchain 'unknown', which counts as stale: a record's ``env`` names its
compiler and twin digest but not the target profile it ran with, and a migration must not probe
the host it runs on (often not the one that measured). Each existing winner gets one history row,
"stored before the history was kept", at its own time.

Records gain a plain column with a default (SQLite adds it without rebuilding the append-only
table); the small tiling table is rebuilt for its new primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNKNOWN = "unknown"
_TILINGS_FK = "fk_tw_tilings_toolchain_tw_toolchains"


def _id() -> sa.types.TypeEngine[int]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _rebuild_tilings(key: list[str], toolchain: str | None) -> None:
    """SQLite: tw_tilings copied into a new table of primary key ``key`` (with a toolchain
    column, copied from the column ``toolchain`` or 'unknown', when ``key`` holds it)."""
    columns = [
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column("record_id", _id(), nullable=False),
        sa.Column("tiling", _json(), nullable=False),
        sa.Column("latency_us", sa.Double(), nullable=False),
        sa.Column("default_latency_us", sa.Double(), nullable=True),
        sa.Column("speedup", sa.Double(), nullable=True),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]
    keys: list[Any] = [
        sa.ForeignKeyConstraint(
            ["workload_id"], ["tw_workloads.id"], name="fk_tw_tilings_workload_id_tw_workloads"
        ),
        sa.ForeignKeyConstraint(
            ["record_id"], ["tw_records.id"], name="fk_tw_tilings_record_id_tw_records"
        ),
        sa.PrimaryKeyConstraint(*key, name="pk_tw_tilings"),
    ]
    names = ", ".join(c.name for c in columns)
    if "toolchain" in key:
        columns.append(sa.Column("toolchain", sa.String(16), nullable=False))
        keys.append(sa.ForeignKeyConstraint(["toolchain"], ["tw_toolchains.id"], name=_TILINGS_FK))
    op.create_table("_tw_tilings_new", *columns, *keys)
    source = names if "toolchain" not in key else f"{names}, {toolchain or repr(UNKNOWN)}"
    into = names if "toolchain" not in key else f"{names}, toolchain"
    op.execute(f"INSERT INTO _tw_tilings_new ({into}) SELECT {source} FROM tw_tilings")
    op.drop_table("tw_tilings")
    op.rename_table("_tw_tilings_new", "tw_tilings")


def upgrade() -> None:
    toolchains = op.create_table(
        "tw_toolchains",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("compiler", sa.String(64), nullable=False),
        sa.Column("headers", sa.String(64), nullable=False),
        sa.Column("profile", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tw_toolchains"),
    )
    assert toolchains is not None
    now = op.get_bind().execute(sa.select(sa.func.current_timestamp())).scalar()
    op.bulk_insert(
        toolchains,
        [
            {
                "id": UNKNOWN,
                "backend": UNKNOWN,
                "compiler": UNKNOWN,
                "headers": UNKNOWN,
                "profile": UNKNOWN,
                "created_at": now,
            }
        ],
    )
    op.add_column(
        "tw_records",
        sa.Column("toolchain", sa.String(16), nullable=False, server_default=UNKNOWN),
    )
    toolchain = sa.Column("toolchain", sa.String(16), nullable=False, server_default=UNKNOWN)
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot alter a primary key: the table is copied into its new form.
        _rebuild_tilings(["workload_id", "toolchain"], None)
    else:
        op.add_column("tw_tilings", toolchain)
        op.drop_constraint("pk_tw_tilings", "tw_tilings", type_="primary")
        op.create_primary_key("pk_tw_tilings", "tw_tilings", ["workload_id", "toolchain"])
        op.create_foreign_key(_TILINGS_FK, "tw_tilings", "tw_toolchains", ["toolchain"], ["id"])
        op.alter_column("tw_tilings", "toolchain", server_default=None)
    op.create_table(
        "tw_winner_history",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("workload_id", _id(), nullable=False),
        sa.Column("toolchain", sa.String(16), nullable=False),
        sa.Column("record_id", _id(), nullable=False),
        sa.Column("tiling", _json(), nullable=False),
        sa.Column("latency_us", sa.Double(), nullable=False),
        sa.Column("default_latency_us", sa.Double(), nullable=True),
        sa.Column("speedup", sa.Double(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["tw_workloads.id"],
            name="fk_tw_winner_history_workload_id_tw_workloads",
        ),
        sa.ForeignKeyConstraint(
            ["toolchain"], ["tw_toolchains.id"], name="fk_tw_winner_history_toolchain_tw_toolchains"
        ),
        sa.ForeignKeyConstraint(
            ["record_id"], ["tw_records.id"], name="fk_tw_winner_history_record_id_tw_records"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_tw_winner_history"),
    )
    op.create_index("ix_tw_winner_history_workload_id", "tw_winner_history", ["workload_id"])
    op.execute(
        "INSERT INTO tw_winner_history (workload_id, toolchain, record_id, tiling, latency_us,"
        " default_latency_us, speedup, reason, created_at)"
        " SELECT workload_id, toolchain, record_id, tiling, latency_us, default_latency_us,"
        " speedup, 'stored before the history was kept', updated_at FROM tw_tilings"
        " ORDER BY updated_at, workload_id"
    )


def downgrade() -> None:
    op.drop_index("ix_tw_winner_history_workload_id", table_name="tw_winner_history")
    op.drop_table("tw_winner_history")
    # One winner per workload again: keep each workload's newest.
    op.execute(
        "DELETE FROM tw_tilings WHERE EXISTS (SELECT 1 FROM tw_tilings AS newer"
        " WHERE newer.workload_id = tw_tilings.workload_id"
        " AND (newer.updated_at > tw_tilings.updated_at OR (newer.updated_at ="
        " tw_tilings.updated_at AND newer.toolchain > tw_tilings.toolchain)))"
    )
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_tilings(["workload_id"], None)
    else:
        op.drop_constraint(_TILINGS_FK, "tw_tilings", type_="foreignkey")
        op.drop_constraint("pk_tw_tilings", "tw_tilings", type_="primary")
        op.drop_column("tw_tilings", "toolchain")
        op.create_primary_key("pk_tw_tilings", "tw_tilings", ["workload_id"])
    op.drop_column("tw_records", "toolchain")
    op.drop_table("tw_toolchains")
