"""A backend for tests that compiles and launches nothing: scripted times, counted calls."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tilewise.kernels.backends import Backend, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

#: The error of a launch the script says crashes.
CRASH = "runner died (signal SIGSEGV)"


def scale_relu_dropout_latency(tiling: Tiling) -> float:
    """A latency for tilings of scale_relu_dropout: best at tileLength 2048 and many blocks."""
    return 1000.0 / tiling["blockDim"] + abs(tiling["tileLength"] - 2048) / 100


class FakeBackend(Backend):
    """Keeps the Backend contract with no compiler and no device.

    A run of ``tiling`` takes ``latency(tiling)`` µs (None: the launch crashes; by default
    :func:`scale_relu_dropout_latency`): its samples are that latency times the factors of
    ``spread``, at most ``measure.repeats`` of them (as a real backend stops early after
    ``measure.max_seconds``). Unchecked runs (the final re-measure) take ``remeasure(tiling,
    n)`` for the n-th unchecked run of the tiling when given, as samples (None: it crashes).
    Every answer is right. A build fails with ``build_error(defines)`` when that says so, and
    reports ``spills`` and ``stack_bytes``. Each launch sleeps ``delay_s``. The hooks keep the
    contract's defaults.

    Counted, by build key or tiling key: ``builds`` (a second build of the same defines is
    ``cached``), ``runs`` (every launch), ``checked`` (launches checked against the reference,
    in the order first made) and ``unchecked``.
    """

    name = "fake"

    def __init__(
        self,
        latency: Callable[[Tiling], float | None] = scale_relu_dropout_latency,
        *,
        spread: Sequence[float] = (1.0, 1.01, 0.99),
        remeasure: Callable[[Tiling, int], Sequence[float] | None] | None = None,
        build_error: Callable[[Mapping[str, str]], str | None] | None = None,
        spills: int | None = 0,
        stack_bytes: int | None = 64,
        delay_s: float = 0.0,
    ) -> None:
        self.latency, self.spread, self.remeasure = latency, tuple(spread), remeasure
        self.build_error = build_error
        self.spills, self.stack_bytes, self.delay_s = spills, stack_bytes, delay_s
        self.builds: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()
        self.checked: Counter[str] = Counter()
        self.unchecked: Counter[str] = Counter()

    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult:
        key = repr(sorted(defines.items()))
        self.builds[key] += 1
        cached = self.builds[key] > 1
        error = self.build_error(defines) if self.build_error is not None else None
        if error is not None:
            return BuildResult(ok=False, key=key, error=error, cached=cached)
        return BuildResult(
            ok=True,
            key=key,
            artifact=Path("/nonexistent"),
            cached=cached,
            spills=self.spills,
            stack_bytes=self.stack_bytes,
        )

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
    ) -> RunResult:
        if not build.ok:
            raise ValueError("run() needs a successful build")
        key = tiling.key()
        self.runs[key] += 1
        (self.checked if check else self.unchecked)[key] += 1
        time.sleep(self.delay_s)
        samples: Sequence[float] | None
        if not check and self.remeasure is not None:
            samples = self.remeasure(tiling, self.unchecked[key])
        else:
            latency = self.latency(tiling)
            factors = self.spread[: measure.repeats]
            samples = None if latency is None else [latency * f for f in factors]
        if samples is None:
            return RunResult("crashed", error=CRASH)
        return RunResult("ok", tuple(samples), max_error=0.0 if check else None)
