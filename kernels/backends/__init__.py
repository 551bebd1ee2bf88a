"""Backends build and launch kernel variants; found by name through one registry table."""

from __future__ import annotations

import importlib

from tilewise.errors import InputError
from tilewise.kernels.backends._base import (
    Backend,
    BuildLimits,
    BuildResult,
    MeasureOptions,
    RunResult,
)
from tilewise.kernels.targets import TargetProfile
from tilewise.settings import Settings

__all__ = [
    "BACKENDS",
    "Backend",
    "BuildLimits",
    "BuildResult",
    "MeasureOptions",
    "RunResult",
    "create_backend",
]

#: backend name -> "module:class", imported only when asked for.
BACKENDS: dict[str, str] = {
    "cpu-twin": "tilewise.kernels.backends._cpu_twin:CpuTwinBackend",
    "ascend": "tilewise.kernels.backends._ascend.backend:AscendBackend",
}


def create_backend(
    name: str,
    *,
    settings: Settings | None = None,
    target: TargetProfile | None = None,
    device: int = 0,
) -> Backend:
    """The backend ``name`` for ``target`` on device ``device`` (every backend takes these)."""
    try:
        module, _, cls = BACKENDS[name].partition(":")
    except KeyError:
        raise InputError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None
    factory = getattr(importlib.import_module(module), cls)
    backend: Backend = factory(settings, target=target, device=device)
    return backend
