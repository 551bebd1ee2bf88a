"""The exceptions tilewise raises.

Every error a user can cause or meet derives from :class:`TilewiseError`::

    TilewiseError
    ├── InputError            bad op, dim, dtype, shape, budget or tiling given by a user
    ├── ConfigError           settings or environment unusable (no compiler, no toolkit)
    ├── StoreError            the database cannot be reached or used
    │   └── SchemaError       the database schema is not at the revision this code needs
    └── BackendError          a backend cannot work at all (not a failed trial: those are data)

Third-party errors (SQLAlchemy, subprocess, OS) are translated once, where they are caught,
with ``raise ... from``. A failing tiling is never an exception: it is a record with a status.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


class TilewiseError(Exception):
    """Root of every tilewise error."""


class InputError(TilewiseError, ValueError):
    """A request names something that does not exist or a value out of range."""


class ConfigError(TilewiseError):
    """The environment or settings do not allow the requested work."""


class StoreError(TilewiseError):
    """The database is unreachable or refused an operation."""


class SchemaError(StoreError):
    """The database schema is older (or newer) than this code."""


class BackendError(TilewiseError):
    """A backend cannot build or run anything (e.g. its toolchain is missing)."""


def close_matches(
    word: object, choices: Iterable[str], *, aliases: Mapping[str, str] | None = None
) -> list[str]:
    """The ones of ``choices`` that ``word`` most likely meant: the same word in another case
    (``m`` for ``M``), a known alias (``fp16`` for ``float16``), else the closest spellings
    (:class:`difflib.SequenceMatcher`'s ratio of at least 0.6, as
    :func:`difflib.get_close_matches`), all of them when several are as close. Empty when none
    is close."""
    if not isinstance(word, str):
        return []
    known = list(choices)
    key = word.strip().lower()
    alias = (aliases or {}).get(key)
    if alias in known:
        return [alias]
    folded = {choice.lower(): choice for choice in known}
    if key in folded:
        return [folded[key]]
    matcher = difflib.SequenceMatcher(b=key)
    ratios = {}
    for lower, choice in folded.items():
        matcher.set_seq1(lower)
        ratios[choice] = matcher.ratio()
    best = max(ratios.values(), default=0.0)
    return [c for c, r in ratios.items() if r >= 0.6 and r == best]


def did_you_mean(
    word: object, choices: Iterable[str], *, aliases: Mapping[str, str] | None = None
) -> str:
    """`` (did you mean X?)`` for the :func:`close_matches` of ``word``, or the empty string:
    the hint an :class:`InputError`'s message ends a wrong name with."""
    found = close_matches(word, choices, aliases=aliases)
    if not found:
        return ""
    either = found[0] if len(found) == 1 else f"{', '.join(found[:-1])} or {found[-1]}"
    return f" (did you mean {either}?)"
