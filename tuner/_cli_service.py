"""`tilewise` commands: service (registered on the main app by tuner.cli)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
