"""Conversions shared by the repository modules."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tilewise.errors import InputError

_E = TypeVar("_E", bound=StrEnum)


def enum_value(cls: type[_E], value: _E | str) -> _E:
    """``value`` (a member or its string) as a member of ``cls``; InputError names the allowed
    values."""
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise InputError(f"unknown {cls.__name__} {value!r} (one of: {allowed})") from None


def rowcount(result: Any) -> int:
    """The rows an UPDATE matched."""
    # Session.execute is typed as returning Result; an UPDATE's result is a CursorResult.
    return int(result.rowcount)


def conflict_insert(session: Session) -> Any:
    """The ``insert`` of the session's dialect, whose statements take ``on_conflict_do_*``
    (PostgreSQL's or SQLite's, the two the store runs on)."""
    dialect = session.get_bind().dialect.name
    return postgresql.insert if dialect == "postgresql" else sqlite.insert
