"""Toolchains (tw_toolchains): what measured a record or a stored tiling.

A toolchain row is inserted the first time something is measured with it, then only read.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.store._models import ToolchainModel, utcnow
from tilewise.types import Toolchain


def toolchain_of(m: ToolchainModel) -> Toolchain:
    found = Toolchain(m.backend, m.compiler, m.headers, m.profile)
    # The id is the row's: 'unknown' and ids of toolchains hashed by another tilewise stay theirs.
    object.__setattr__(found, "id", m.id)
    return found


def commit_toolchain(session: Session, toolchain: Toolchain) -> Toolchain:
    """Get-or-insert ``toolchain`` by its id (safe against a concurrent insert of the same)."""
    if session.get(ToolchainModel, toolchain.id) is not None:
        return toolchain
    model = ToolchainModel(
        id=toolchain.id,
        backend=toolchain.backend,
        compiler=toolchain.compiler,
        headers=toolchain.headers,
        profile=toolchain.profile,
        created_at=utcnow(),
    )
    try:
        with session.begin_nested():
            session.add(model)
    except IntegrityError:
        if session.get(ToolchainModel, toolchain.id) is None:
            raise
    return toolchain
