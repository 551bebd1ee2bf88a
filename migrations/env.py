"""Alembic environment for tilewise's own tables (``tw_*``).

Optuna's tables live in the same database and are migrated by Optuna, with its own
``alembic_version`` table: here we use ``tilewise_alembic_version`` and only ever look at our
tables, so autogenerate never proposes to drop Optuna's.

This file does not configure logging (no ``fileConfig``): it runs inside the tilewise process,
whose logging is not Alembic's business.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from alembic import context
from sqlalchemy.engine import Connection

from tilewise.store._engine import VERSION_TABLE, create_engine
from tilewise.store._models import TABLE_NAMES, Base

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # Reflection filter: ignore every table that is not ours (Optuna's, anything else).
    if type_ == "table":
        return name in TABLE_NAMES
    return True


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    if type_ == "table":
        return name in TABLE_NAMES
    return True


def _options(dialect_name: str) -> dict[str, Any]:
    render: Literal[True, False] = dialect_name == "sqlite"
    return {
        "target_metadata": target_metadata,
        "version_table": VERSION_TABLE,
        "include_name": include_name,
        "include_object": include_object,
        "compare_type": True,
        # SQLite cannot ALTER most things: later revisions use batch mode (copy and move).
        "render_as_batch": render,
        # Our SQLite engines BEGIN before DDL too, so a failed revision rolls back whole.
        "transactional_ddl": True,
    }


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("TILEWISE_DB_URL")
    if not url:
        raise SystemExit("no database: pass `-x url=...` or set TILEWISE_DB_URL")
    return url


def run_offline() -> None:
    from sqlalchemy.engine import make_url

    url = make_url(_url())
    context.configure(url=url, literal_binds=True, **_options(url.get_backend_name()))
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, **_options(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # tilewise's migrate(): the caller owns the transaction
        _run(connection)
        return
    engine = create_engine(_url())
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
