"""Conversions shared by the repository modules."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

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
