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
        store.check_persistent(settings.db_url)
        before, after = store.migrate(settings.db_url)
    except TilewiseError as exc:
        fail(str(exc))
    if before == after:
        out.print(f"database is at the newest revision ({after}): nothing to do")
    elif before is None:
        out.print(f"database schema created at revision {after}")
    else:
        out.print(f"database upgraded from revision {before} to {after}")
