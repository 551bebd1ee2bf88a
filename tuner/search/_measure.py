"""One tiling on the target, as the tuner tries it: static check, build, run, measure.

The cheap checks run first, so a tiling that cannot work costs neither a compile nor a launch:

1. static check — footprint per memory against the target, the op's validity rules, refined by
   the backend (``Backend.refine_check``);
2. build — the compile-time part only (cached); spills in loops and the stack frame;
3. run — the first launch is checked against the numpy reference;
4. measure — warm-up, repeats, median and spread.

:class:`Measurer` does this and keeps nothing; the tuner's :class:`~tilewise.search._evaluate.
Evaluator` records each :class:`Attempt`, and ``tilewise check --run`` prints one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from tilewise.export import MeasureCellFn
from tilewise.kernels.backends import Backend, BuildLimits, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import Check, OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.settings import Settings
from tilewise.store import RecordStatus
from tilewise.types import Shape, Tiling

#: Where an attempt ended: refused by the static check, at the build (failed, or over the
#: limits on spills and stack), or launched.
Stage = Literal["static", "build", "run"]


@dataclass(frozen=True)
class Attempt:
    """What one tiling did: the stage it reached, its status, and for a run that went well its
    measurement (``run``: median and spread of the samples)."""

    stage: Stage
    status: RecordStatus
    check: Check
    build: BuildResult | None = None
    run: RunResult | None = None
    error: str | None = None
    #: The violated constraints (> 0) of a tiling that did not run, for the search's sampler.
    constraints: dict[str, float] = field(default_factory=dict)

    @property
    def latency_us(self) -> float | None:
        return self.run.median_us if self.run is not None and self.run.ok else None

    def record_fields(self) -> dict[str, Any]:
        """What a record of this attempt holds besides the tiling and where it came from: for
        a run that went well its median, spread and samples; else its status, error and
        violated constraints."""
        run = self.run if self.status == RecordStatus.OK else None
        if run is None:
            return {
                "status": self.status,
                "latency_us": None,
                "error": self.error,
                "constraints": self.constraints or None,
            }
        return {
            "status": RecordStatus.OK,
            "latency_us": run.median_us,
            "spread": run.spread,
            "samples_us": list(run.samples_us),
        }


class Measurer:
    """Tries tilings of one workload on one backend, with the settings' measurement options
    (warm-up, repeats, time cap) and build limits (spills, stack). Builds are asked of the
    backend once per compile-time variant; ``builds``, where given, is where they are kept, to
    share with other Measurers of the same op, dtype and backend (a build depends on the
    compile-time fields and the dtype alone, not on the shape)."""

    def __init__(
        self,
        *,
        spec: OpSpec,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        backend: Backend,
        settings: Settings,
        builds: dict[str, BuildResult] | None = None,
    ) -> None:
        self.spec, self.shape, self.dtype, self.target = spec, shape, dtype, target
        self.backend, self.settings = backend, settings
        self.measure = MeasureOptions(
            settings.warmup, settings.repeats, settings.max_measure_s, settings.warmup_s
        )
        self.limits = BuildLimits(settings.max_loop_spills, settings.max_stack_bytes)
        self._builds: dict[str, BuildResult] = {} if builds is None else builds

    def build(self, tiling: Tiling) -> BuildResult:
        """The build of ``tiling``'s compile-time part, asked of the backend once per variant."""
        defines = self.spec.compile_key(tiling, self.dtype)
        key = repr(sorted(defines.items()))
        if key not in self._builds:
            self._builds[key] = self.backend.build(self.spec, defines)
        return self._builds[key]

    def all_variants_rejected(self) -> bool:
        """Whether every compile-time variant of the op failed its build or its build checks."""
        variants = 1
        for tunable in self.spec.compile_tunables:
            variants *= len(tunable.values)
        rejected = [
            b
            for b in self._builds.values()
            if not b.ok or any(v > 0 for v in b.violations(self.limits).values())
        ]
        return len(rejected) >= variants

    def launch(
        self, build: BuildResult, tiling: Tiling, *, check: bool, measure: MeasureOptions
    ) -> RunResult:
        return self.backend.run(
            build,
            self.spec,
            shape=self.shape,
            dtype=self.dtype,
            target=self.target,
            tiling=tiling,
            check=check,
            measure=measure,
        )

    def static_check(self, tiling: Tiling) -> Check:
        """The op's checks, refined by the backend (``Backend.refine_check``: on Ascend targets
        with ``ub_check=compiler``, bishengir-compile's UB verdict on the kernel's buffer plan
        instead of the analytic footprint)."""
        check = self.spec.check(tiling, self.shape, self.dtype, self.target)
        return self.backend.refine_check(
            self.spec, tiling, self.shape, self.dtype, self.target, check
        )

    def attempt(self, tiling: Tiling, measure: MeasureOptions | None = None) -> Attempt:
        """Check, build, run (checked against the reference) and measure ``tiling`` (with
        ``measure``, else the settings' options), stopping at the first stage it fails."""
        check = self.static_check(tiling)
        if not check.valid:
            bad = {k: v for k, v in check.constraints.items() if v > 0}
            return Attempt(
                "static",
                RecordStatus.INFEASIBLE,
                check,
                error="; ".join(check.reasons),
                constraints=bad,
            )
        build = self.build(tiling)
        if not build.ok:
            return Attempt(
                "build",
                RecordStatus.BUILD_FAILED,
                check,
                build,
                error=build.error,
                constraints={"build": 1.0},
            )
        over = {k: v for k, v in build.violations(self.limits).items() if v > 0}
        if over:
            reason = (
                f"{build.spills} spills in loops (max {self.limits.max_loop_spills}), "
                f"stack {build.stack_bytes} B (max {self.limits.max_stack_bytes})"
            )
            return Attempt(
                "build", RecordStatus.INFEASIBLE, check, build, error=reason, constraints=over
            )
        run = self.launch(build, tiling, check=True, measure=measure or self.measure)
        if not run.ok:
            return Attempt(
                "run",
                run.status,
                check,
                build,
                run,
                error=run.error,
                constraints={run.status: 1.0},
            )
        return Attempt("run", RecordStatus.OK, check, build, run)

    def side_by_side(
        self, tilings: Mapping[str, Tiling], *, rounds: int, per_round: MeasureOptions
    ) -> dict[str, list[float]]:
        """Per-launch times (µs) of each of ``tilings`` by label, in ``rounds`` rounds that
        visit each in turn, so that a busy moment of a shared machine slows all of them: the
        first round is each one's :meth:`attempt` (checked against the reference), the others
        unchecked launches with ``per_round``. A tiling whose attempt fails is left out; one
        equal to an earlier label's is measured once and shares its times."""
        unique: dict[Tiling, list[str]] = {}
        for label, tiling in tilings.items():
            unique.setdefault(tiling, []).append(label)
        times: dict[Tiling, list[float]] = {}
        builds: dict[Tiling, BuildResult] = {}
        # Only the first launch warms the host's cores up (the settings' warmup_s): the others
        # follow it at once.
        warm = dataclasses.replace(self.measure, warmup_s=0.0)
        for n, tiling in enumerate(unique):
            attempt = self.attempt(tiling, None if n == 0 else warm)
            if attempt.status == RecordStatus.OK and attempt.build is not None and attempt.run:
                builds[tiling], times[tiling] = attempt.build, list(attempt.run.samples_us)
        for _ in range(rounds - 1):
            for tiling, build in builds.items():
                run = self.launch(build, tiling, check=False, measure=per_round)
                if run.ok:
                    times[tiling].extend(run.samples_us)
        return {label: times[t] for t, labels in unique.items() if t in times for label in labels}


#: A grid cell's sample shape measures its contenders in this many rounds, each launch of a
#: round after the first (checked) with these options.
CELL_ROUNDS = 5
CELL_ROUND = MeasureOptions(warmup=1, repeats=5, max_seconds=1.0)


def cell_measurer(settings: Settings, backends: ExitStack) -> MeasureCellFn:
    """What ``tilewise export --measure`` measures a grid cell's sample shape with: tilings
    side by side on the target's backend (opened once per target, closed with ``backends``),
    :meth:`Measurer.side_by_side`. Nothing is recorded: the shapes are a cell's samples, not
    workloads anyone asked for. A build is asked of the backend once per compile-time variant
    of an op, dtype and target, for all the sample shapes."""
    from tilewise.kernels.backends import create_backend

    opened: dict[str, Backend] = {}
    builds: dict[tuple[str, str, str], dict[str, BuildResult]] = {}

    def measure(
        spec: OpSpec, target: TargetProfile, dtype: str, shape: Shape, tilings: Mapping[str, Tiling]
    ) -> dict[str, list[float]]:
        if target.name not in opened:
            opened[target.name] = backends.enter_context(
                create_backend(target.backend, settings=settings, target=target)
            )
        measurer = Measurer(
            spec=spec,
            shape=shape,
            dtype=dtype,
            target=target,
            backend=opened[target.name],
            settings=settings,
            builds=builds.setdefault((spec.name, dtype, target.name), {}),
        )
        return measurer.side_by_side(tilings, rounds=CELL_ROUNDS, per_round=CELL_ROUND)

    return measure
