"""``python -m tilewise`` and the ``tilewise`` command's entry point.

The command's imports (typer, SQLAlchemy, Optuna) take a few hundred milliseconds; a Ctrl-C
within them ends the command as one at any later moment does, with one line and exit code 130,
not a traceback through the import machinery.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from tilewise.cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
