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
