"""Backends build and launch kernel variants; found by name through one registry table.

Two parts of the Ascend side need no backend, no CANN and no NPU, and are public here for
whoever asks without building anything (``tilewise tune --predict``, ``tilewise check``): the
analytic cost model (:func:`predict` one tiling, :func:`rank` an op's tilings; every figure is
predicted, not measured) and the UB plan check by Huawei's AscendNPU IR compiler
(:func:`check_plan`, which needs the ``ascend-ir`` extra).
"""

from __future__ import annotations

import importlib

from tilewise.errors import InputError
from tilewise.kernels.backends._ascend.cost_model import Prediction, predict, rank
from tilewise.kernels.backends._ascend.plan_check import PlanVerdict, check_plan
from tilewise.kernels.backends._base import (
    Backend,
    BuildLimits,
    BuildResult,
    MeasureOptions,
    RunResult,
)
from tilewise.kernels.backends._toolchain import (
    current_toolchain,
    current_toolchain_id,
    current_toolchain_ids,
)
from tilewise.kernels.targets import TargetProfile
from tilewise.settings import Settings

__all__ = [
    "BACKENDS",
    "Backend",
    "BuildLimits",
    "BuildResult",
    "MeasureOptions",
    "PlanVerdict",
    "Prediction",
    "RunResult",
    "check_plan",
    "create_backend",
    "current_toolchain",
    "current_toolchain_id",
    "current_toolchain_ids",
    "predict",
    "rank",
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
