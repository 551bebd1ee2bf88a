"""What proposing costs: the wall and CPU seconds a sampler spends per proposal.

:class:`TimedSampler` wraps any Optuna sampler and adds up the time spent in its methods (what
Optuna calls while asking for a trial and telling its outcome); the ask-and-tell loop
(:mod:`tilewise.search._loop`) reads the sums around each proposal into :class:`ProposeTimes`.
It measures the strategy only, not the storage: a Tuner's study lives in SQL, and the trial
Optuna creates there is the storage's cost, whatever the strategy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class TimedSampler(optuna.samplers.BaseSampler):
    """``inner``, with the wall (``seconds``) and process CPU (``cpu_seconds``) time of its
    calls added up. The CPU time is the whole process's: a model fit's BLAS threads count."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def _timed(self, method: str, *args: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return getattr(self.inner, method)(*args)
        finally:
            self.seconds += time.perf_counter() - wall
            self.cpu_seconds += time.process_time() - cpu

    def __str__(self) -> str:
        return str(self.inner)

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        result: dict[str, BaseDistribution] = self._timed(
            "infer_relative_search_space", study, trial
        )
        return result

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._timed("sample_relative", study, trial, search_space)
        return result

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._timed("sample_independent", study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._timed("before_trial", study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._timed("after_trial", study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


@dataclass
class ProposeTimes:
    """Seconds a search's sampler spent on each of its proposals, in order."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def summary(self) -> dict[str, float | None]:
        return summarize_times([self])


def summarize_times(runs: Sequence[ProposeTimes]) -> dict[str, float | None]:
    """Median wall and CPU seconds per proposal over every proposal of ``runs``; ``late_s``:
    the median over the last tenth of each run's proposals (the most records: where a model's
    cost shows its growth); ``total_s``: all the wall seconds."""
    wall = [w for r in runs for w in r.wall]
    cpu = [c for r in runs for c in r.cpu]
    late = [w for r in runs for w in r.wall[len(r.wall) - max(1, len(r.wall) // 10) :]]
    if not wall:
        return {"median_s": None, "cpu_median_s": None, "late_s": None, "total_s": 0.0}
    return {
        "median_s": float(np.median(wall)),
        "cpu_median_s": float(np.median(cpu)),
        "late_s": float(np.median(late)),
        "total_s": float(sum(wall)),
    }
