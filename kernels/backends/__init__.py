"""Backends build and launch kernel variants; found by name through one registry table."""

from __future__ import annotations

import importlib

from kernels.backends._base import Backend, BuildLimits, BuildResult, MeasureOptions, RunResult
from tuner.errors import InputError

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
    "cpu-twin": "kernels.backends._cpu_twin:CpuTwinBackend",
}


def create_backend(name: str) -> Backend:
    try:
        module, _, cls = BACKENDS[name].partition(":")
    except KeyError:
        raise InputError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
