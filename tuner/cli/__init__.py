"""The ``tilewise`` command.

Bad input (an unknown op, dim, dtype or target, a malformed shape, a budget below one, an
unreachable database) ends with one line on stderr naming the problem and exit code 2, before
anything is written. Each command group is a module of this package; they share
:mod:`tilewise.cli._common` and never import each other. Importing them registers their
commands on :data:`app`.
"""

from __future__ import annotations

import sys

import typer
from typer.exceptions import TyperException

from tilewise.cli import (
    bench,
    check,
    db,
    export,
    misses,
    ops,
    records,
    service,
    show,
    submit,
    tune,
    tune_set,
)
from tilewise.cli._common import ONE_LINE, app, err
from tilewise.errors import TilewiseError

__all__ = ["app", "main"]

COMMANDS = (ops, tune, tune_set, submit, misses, show, check, records, export, service, bench, db)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(2)  # `tilewise` alone: typer printed the help already
        # A malformed command line (an unknown command or option, a value of the wrong type, a
        # missing argument) is bad input like any other: one line and exit code 2, not click's
        # usage block and framed message.
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        err.print(f"error: {' '.join(exc.format_message().split())}{hint}", **ONE_LINE)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted", highlight=False)
        sys.exit(1)
    except TilewiseError as exc:  # anything not caught closer to its cause
        err.print(f"error: {' '.join(str(exc).split())}", **ONE_LINE)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
