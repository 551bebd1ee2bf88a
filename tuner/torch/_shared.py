"""The one :class:`~tilewise.launch.Ops` every ``torch.ops.tilewise`` call runs through."""

from __future__ import annotations

import os
import threading

from tilewise.launch import Ops, load_ops
from tilewise.runtime import TilingTable
from tilewise.settings import Settings

_lock = threading.Lock()
_ops: Ops | None = None


def use_table(
    source: TilingTable | str | os.PathLike[str] | None = None,
    *,
    settings: Settings | None = None,
) -> Ops:
    """Run the torch ops with the tilings of ``source`` from now on, in every thread; returns
    the :class:`~tilewise.launch.Ops` they go through (its ``last_choice`` says what ran).

    ``source`` and ``settings`` are :func:`tilewise.load_ops`'s: a table, a JSON table file, a
    service or database URL, or None for the database of the settings.
    """
    global _ops
    ops = load_ops(source, settings=settings)
    with _lock:
        _ops = ops
    return ops


def current_ops() -> Ops:
    """The :class:`~tilewise.launch.Ops` of the last :func:`use_table`; before one, that of
    the settings' database, opened at the first call (importing opens nothing)."""
    global _ops
    with _lock:
        if _ops is None:
            _ops = load_ops()
        return _ops
