"""``tilewise db``: database schema commands."""

from __future__ import annotations

from tilewise.cli._common import DbOpt, Typer, app, fail, out, settings_for
from tilewise.errors import TilewiseError

db_app = Typer(help="Database schema commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Migrate the database schema to the newest revision."""
    from tilewise import store

    settings = settings_for(db)
    try:
        store.migrate(settings.db_url)
    except TilewiseError as exc:
        fail(str(exc))
    out.print("database is at the newest revision")
