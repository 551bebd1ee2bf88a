"""Locks a forked child finds free.

A fork copies the forking thread alone: a lock another thread of the parent held at that moment
stays held in the child for ever, and the child's first use of it (a DataLoader worker's first
call, say) waits without end. An owner names its lock attributes here once; each forked child
gives them new locks (its copies of what they guarded are left as they were).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["renew_in_child"]

#: (owner, attribute names, lock factory), the owner held weakly: a dead one is dropped.
_OWNERS: list[tuple[weakref.ref[object], tuple[str, ...], Callable[[], object]]] = []
_GUARD = threading.Lock()


def renew_in_child(
    owner: object, *attributes: str, factory: Callable[[], object] = threading.Lock
) -> None:
    """Give ``owner`` a new ``factory()`` lock in each of ``attributes`` in a forked child."""
    with _GUARD:
        _OWNERS[:] = [entry for entry in _OWNERS if entry[0]() is not None]
        _OWNERS.append((weakref.ref(owner), attributes, factory))


def _renew() -> None:
    global _GUARD
    _GUARD = threading.Lock()
    for ref, attributes, factory in _OWNERS:
        owner = ref()
        if owner is not None:
            for name in attributes:
                setattr(owner, name, factory())


os.register_at_fork(after_in_child=_renew)
