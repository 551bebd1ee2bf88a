"""The backend contract: build kernel variants for a target, launch them, time them.

A backend is used by one worker thread at a time (it may hold a runner process); several
backends may exist in one process. It has two separate stages:

``build(spec, defines)``
    Compile the kernel source of ``spec`` with the compile-time part of a tiling (``defines``,
    from :meth:`OpSpec.compile_key`). Builds are cached: asking twice for the same source,
    defines, compiler and flags returns the cached artifact (``BuildResult.cached``). Resource
    checks that need the compiler (register spills in loops, stack frame size) are reported in
    ``BuildResult.spills`` / ``stack_bytes`` and judged by :meth:`BuildResult.violations`.

``run(build, spec, workload ..., tiling, check=, measure=)``
    Launch the built variant with the runtime part of the tiling. With ``check`` the first
    launch's outputs are compared with the op's numpy reference first. Then ``measure.warmup``
    untimed launches and up to ``measure.repeats`` timed ones (stopping early after
    ``measure.max_seconds``).

Two optional hooks let a backend bring what it knows of its hardware to the search; their
defaults change nothing, so a backend that knows no more than the op spec overrides neither:

``refine_check(spec, tiling, shape, dtype, target, check)``
    The static check of ``tiling`` (the op's ``check``, before any compile) with the backend's own
    verdicts in place of the op's analytic ones, e.g. a compiler's memory planner instead of the
    footprint formula. It returns a :class:`~tilewise.kernels.ops.Check` like ``check``; the
    default returns ``check`` itself.

``prior_tilings(spec, shape, dtype, target, limit=)``
    Up to ``limit`` tilings the backend expects to be fast, best first (from a cost model, say),
    which the search measures before its own proposals: a prior, measured like any other
    tiling, never taken on trust. The default has none.

Failures are data, never exceptions: a compile error is ``BuildResult(ok=False, error=...)``; a
crash, hang, twin API violation or wrong answer is a ``RunResult`` whose ``status`` says which
(``crashed``, ``timeout``, ``wrong``) and whose ``error`` says why. A backend raises only
:class:`~tilewise.errors.BackendError`, when it cannot work at all (e.g. no compiler or toolkit),
with a message that says what to install.
"""

from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilewise.kernels.ops import Check, OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.status import RecordStatus
from tilewise.types import Shape, Tiling, Toolchain


@dataclass(frozen=True)
class BuildLimits:
    """Thresholds the build-time checks apply (from settings)."""

    max_loop_spills: int
    max_stack_bytes: int


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    key: str
    artifact: Path | None = None
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False
    spills: int | None = None  # register spills inside loops; None = the compiler cannot tell
    stack_bytes: int | None = None  # largest stack frame
    env: dict[str, Any] = field(default_factory=dict)

    def violations(self, limits: BuildLimits) -> dict[str, float]:
        """Constraint values (> 0 violated, relative excess) of the build-time checks."""
        out: dict[str, float] = {}
        if self.spills is not None:
            out["spills"] = (self.spills - limits.max_loop_spills) / max(limits.max_loop_spills, 1)
        if self.stack_bytes is not None:
            out["stack"] = (self.stack_bytes - limits.max_stack_bytes) / max(
                limits.max_stack_bytes, 1
            )
        return out


@dataclass(frozen=True)
class MeasureOptions:
    warmup: int = 1
    repeats: int = 7
    max_seconds: float = 2.0
    #: Seconds of launches, discarded, before the warm-up runs. On the twin's host a core that
    #: sat idle for 0.1 s (while the tuner fitted its surrogates) can take up to ~85 ms to
    #: run at full speed again, and a short measurement taken then reads up to 2x slow. The
    #: device's own timing does not depend on the host's cores: the Ascend backend ignores it.
    warmup_s: float = 0.0


@dataclass(frozen=True, init=False)
class RunResult:
    status: RecordStatus  # ok, wrong, crashed or timeout
    samples_us: tuple[float, ...]
    error: str | None
    max_error: float | None  # largest |out - reference| of a checked run

    def __init__(
        self,
        status: RecordStatus | str,
        samples_us: tuple[float, ...] = (),
        error: str | None = None,
        max_error: float | None = None,
    ) -> None:
        # A status is taken by value too (as the store takes it), and kept as the member.
        object.__setattr__(self, "status", RecordStatus(status))
        object.__setattr__(self, "samples_us", samples_us)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "max_error", max_error)

    @property
    def ok(self) -> bool:
        return self.status is RecordStatus.OK

    @property
    def median_us(self) -> float | None:
        return statistics.median(self.samples_us) if self.samples_us else None

    @property
    def spread(self) -> float | None:
        """Interquartile range over the median: the run-to-run noise of this measurement."""
        if len(self.samples_us) < 2:
            return 0.0 if self.samples_us else None
        q = statistics.quantiles(self.samples_us, n=4, method="inclusive")
        median = statistics.median(self.samples_us)
        return (q[2] - q[0]) / median if median > 0 else None


class Backend(ABC):
    """See the module docstring for the contract."""

    name: str

    @abstractmethod
    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult: ...

    @abstractmethod
    def run(
        self,
        build: BuildResult,
        spec: OpSpec,
        *,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        tiling: Tiling,
        check: bool,
        measure: MeasureOptions,
    ) -> RunResult: ...

    def check_runnable(self) -> None:
        """Raises BackendError naming what this host lacks to run kernels (a worker asks before
        it claims a job); by default nothing: a backend that builds, runs here."""

    def refine_check(
        self,
        spec: OpSpec,
        tiling: Tiling,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        check: Check,
    ) -> Check:
        """``check`` (the op's static check of ``tiling``) with this backend's own verdicts in
        place of the analytic ones; by default ``check`` unchanged."""
        return check

    def prior_tilings(
        self, spec: OpSpec, shape: Shape, dtype: str, target: TargetProfile, *, limit: int
    ) -> list[Tiling]:
        """Up to ``limit`` tilings this backend expects to be fast, best first, for the search to
        measure first; by default none."""
        return []

    def toolchain(self, target: TargetProfile) -> Toolchain:
        """The toolchain this backend measures ``target`` with (kept with every record and
        stored tiling). By default the host's own for the target (:func:`current_toolchain`):
        right for a backend that builds with the host's tools; others override it."""
        from tilewise.kernels.backends._toolchain import current_toolchain

        return current_toolchain(target) or Toolchain.unknown()

    def environment(self) -> dict[str, Any]:
        """Facts recorded with every measurement (compiler, flags, host ...)."""
        return {"backend": self.name}

    def close(self) -> None:
        """Release processes and files. Idempotent."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
