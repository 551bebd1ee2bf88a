"""The ``replay`` target: a recorded tuning space played back as if it were a device.

A recorded space is a CSV with one column per tunable (constant columns kept) and then
``time_ms``, as ``bench/record_space.py`` records one exhaustively and ``tilewise records
--format csv`` exports the records of any tuned workload (:mod:`tilewise.records`); ``inf``
marks a configuration that passed the kernel's restrictions but failed to compile or run.
Every configuration allowed by the restrictions is a row, so:

* a configuration in the file costs one evaluation and returns its recorded time, or fails
  (``inf``) — a failure costs an evaluation too, like a failed compile;
* a configuration absent from the file breaks the restrictions: it is infeasible, rejected
  without an evaluation, and reported as a constraint.

The times are visible only through :meth:`ReplaySpace.evaluate`, which counts the evaluations
itself; :attr:`ReplaySpace.optimum_ms` gives the answer away and is meant for reports after a
run. :func:`replay_search` drives one Optuna sampler against a space with the Tuner's
ask-and-tell loop (:mod:`tilewise.search._loop`: ask, reject or evaluate, tell with
constraints; a configuration is never evaluated twice).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution

from tilewise.errors import InputError
from tilewise.records import TIME_COLUMN
from tilewise.search._loop import AskTellLoop
from tilewise.search._timing import ProposeTimes

Value = int | float | str
Config = tuple[Value, ...]


def _parse_value(text: str) -> Value:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


@dataclass(frozen=True)
class ReplayResult:
    """What one evaluation (or rejection) of a configuration returned."""

    status: Literal["ok", "failed", "infeasible"]
    time_ms: float | None = None

    @property
    def value(self) -> float | None:
        """What the study minimises: the recorded time; None for a failed or infeasible
        configuration."""
        return self.time_ms

    @property
    def constraints(self) -> dict[str, float]:
        # Optuna's sense: > 0 violated.
        return {"ok": {}, "failed": {"failed": 1.0}, "infeasible": {"restrictions": 1.0}}[
            self.status
        ]


class ReplaySpace:
    """A recorded space loaded from CSV; see the module docstring."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with self.path.open(newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
        except OSError as exc:
            raise InputError(f"replay: cannot read {self.path}: {exc.strerror}") from exc
        except (UnicodeDecodeError, csv.Error) as exc:  # not a CSV file of text
            raise InputError(f"replay: {self.path} is not a CSV text file: {exc}") from None
        if not rows or rows[0][-1:] != [TIME_COLUMN] or len(rows[0]) < 2:
            raise InputError(
                f"replay: {self.path} must have a header of tunables then {TIME_COLUMN!r}"
            )
        self.names: tuple[str, ...] = tuple(rows[0][:-1])
        if len(set(self.names)) != len(self.names):
            raise InputError(f"replay: {self.path} names a tunable twice")
        self._times: dict[Config, float] = {}
        lines: dict[Config, int] = {}
        for line, row in enumerate(rows[1:], start=2):
            if len(row) != len(self.names) + 1:
                raise InputError(f"replay: {self.path}:{line} has {len(row)} fields")
            config = tuple(_parse_value(v) for v in row[:-1])
            try:
                time_ms = float(row[-1])
            except ValueError:
                time_ms = math.nan
            # NaN is no time (inf is a failed configuration), and a time of 0 or less leaves
            # "within 5% of the optimum" without a meaning.
            if math.isnan(time_ms):
                raise InputError(f"replay: {self.path}:{line}: bad time {row[-1]!r}")
            if time_ms <= 0:
                raise InputError(
                    f"replay: {self.path}:{line}: time {row[-1]!r} is not positive "
                    "(a time in ms > 0, or inf for a configuration that failed)"
                )
            if config in lines:  # which of two times is the configuration's? Not ours to pick
                raise InputError(
                    f"replay: {self.path}:{line} repeats the configuration of line {lines[config]}"
                )
            self._times[config], lines[config] = time_ms, line
        if not self._times:
            raise InputError(f"replay: {self.path} has no configurations")
        if not any(math.isfinite(t) for t in self._times.values()):
            raise InputError(f"replay: {self.path} has no configuration that ran (every time inf)")
        self.values: dict[str, tuple[Value, ...]] = {
            name: tuple(sorted({c[i] for c in self._times}, key=_sort_key))
            for i, name in enumerate(self.names)
        }
        self.evaluations = 0
        self.infeasible = 0

    # -- what a strategy may know before evaluating anything -------------------------------
    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        """One categorical distribution per column, over its distinct values."""
        return {n: CategoricalDistribution(list(v)) for n, v in self.values.items()}

    def config_of(self, params: Mapping[str, Any]) -> Config:
        return tuple(params[n] for n in self.names)

    def feasible(self, params: Mapping[str, Any]) -> bool:
        """Whether the configuration satisfies the restrictions (is a row of the file)."""
        return self.config_of(params) in self._times

    def candidates(self) -> list[dict[str, Value]]:
        """Every feasible configuration, without its time."""
        return [dict(zip(self.names, c, strict=True)) for c in self._times]

    @property
    def configs(self) -> int:
        return len(self._times)

    @property
    def valid(self) -> int:
        """Configurations that compiled and ran (a finite time)."""
        return sum(1 for t in self._times.values() if math.isfinite(t))

    def recorded(self) -> list[tuple[dict[str, Value], float]]:
        """Every configuration with its time: for a space used as tuned results (a warm start
        from another shape), never for the space being searched."""
        return [(dict(zip(self.names, c, strict=True)), t) for c, t in self._times.items()]

    # -- the measurement -----------------------------------------------------------------
    def evaluate(self, params: Mapping[str, Any]) -> ReplayResult:
        """The recorded outcome of one configuration; counts an evaluation unless infeasible."""
        time_ms = self._times.get(self.config_of(params))
        if time_ms is None:
            self.infeasible += 1
            return ReplayResult("infeasible")
        self.evaluations += 1
        if not math.isfinite(time_ms):
            return ReplayResult("failed")
        return ReplayResult("ok", time_ms)

    @property
    def optimum_ms(self) -> float:
        """The best recorded time. Gives the answer away: for reports after a run."""
        return min(self._times.values())

    def within(self, fraction: float) -> int:
        """How many configurations are within ``fraction`` of the optimum."""
        bound = self.optimum_ms * (1.0 + fraction)
        return sum(1 for t in self._times.values() if t <= bound)

    def random_draws_to(self, fraction: float) -> float:
        """Uniform random search's expected draws (without replacement, a failed configuration
        costing a draw too) to one within ``fraction`` of the optimum: (N + 1) / (g + 1)."""
        return (self.configs + 1) / (self.within(fraction) + 1)


def _sort_key(value: Value) -> tuple[int, float, str]:
    if isinstance(value, str):
        return (1, 0.0, value)
    return (0, float(value), "")


@dataclass
class ReplayRun:
    """One search on a replay space: the best-so-far time after each evaluation."""

    best_after: list[float] = field(default_factory=list)  # index i: after i + 1 evaluations
    best_config: dict[str, Any] | None = None
    best_ms: float | None = None
    proposals: int = 0
    duplicates: int = 0
    propose: ProposeTimes = field(default_factory=ProposeTimes)  # the sampler's seconds

    def evaluations_to(self, bound_ms: float) -> int | None:
        """Evaluations until the best-so-far was at most ``bound_ms``; None if never."""
        for i, best in enumerate(self.best_after):
            if best <= bound_ms:
                return i + 1
        return None

    def best_at(self, evaluations: int) -> float | None:
        """Best-so-far after ``evaluations`` evaluations (None if the run stopped earlier)."""
        if evaluations > len(self.best_after) or evaluations < 1:
            return None
        return self.best_after[evaluations - 1]


def replay_search(
    space: ReplaySpace,
    sampler: optuna.samplers.BaseSampler,
    *,
    budget: int,
    warm_start: Sequence[Mapping[str, Any]] = (),
    on_evaluation: Callable[[ReplayRun], None] | None = None,
    stop_at_ms: float | None = None,
) -> ReplayRun:
    """Search ``space`` with ``sampler`` until ``budget`` evaluations (in-memory study).

    ``warm_start`` configurations are enqueued first. Like the Tuner: a configuration is
    evaluated at most once (a repeat proposal is told its earlier outcome for free), failures and
    rejections are told as ``inf`` with constraints, and the loop gives up after many proposals
    without an evaluation (an exhausted space). ``stop_at_ms`` ends the run once a time at most
    that has been found (a benchmark that knows the optimum: nothing after it changes a figure).
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler, direction="minimize")
    for params in warm_start:
        study.enqueue_trial(dict(params), skip_if_exists=True)
    run = ReplayRun()
    _ReplayLoop(
        space, study, budget=budget, run=run, on_evaluation=on_evaluation, stop_at_ms=stop_at_ms
    ).run()
    return run


class _ReplayLoop(AskTellLoop[Config, ReplayResult]):
    """replay_search's ask-and-tell loop: configurations evaluated on the recorded space; one
    that breaks the restrictions spends no evaluation."""

    def __init__(
        self,
        space: ReplaySpace,
        study: optuna.Study,
        *,
        budget: int,
        run: ReplayRun,
        on_evaluation: Callable[[ReplayRun], None] | None,
        stop_at_ms: float | None = None,
    ) -> None:
        super().__init__(study, space.distributions, budget=budget, seen={}, counts=run)
        self.space, self.progress, self.on_evaluation = space, run, on_evaluation
        self.start, self.stop_at_ms = space.evaluations, stop_at_ms

    def should_end(self) -> bool:
        best = self.progress.best_ms
        return self.stop_at_ms is not None and best is not None and best <= self.stop_at_ms

    def key(self, params: Mapping[str, Any]) -> Config:
        return self.space.config_of(params)

    def spent(self) -> int:
        return self.space.evaluations - self.start

    def evaluate(self, trial: optuna.Trial) -> ReplayResult:
        result = self.space.evaluate(trial.params)
        if not self.idle(result):
            run, time_ms = self.progress, result.time_ms
            if time_ms is not None and (run.best_ms is None or time_ms < run.best_ms):
                run.best_ms, run.best_config = time_ms, dict(trial.params)
            run.best_after.append(run.best_ms if run.best_ms is not None else math.inf)
            if self.on_evaluation is not None:
                self.on_evaluation(run)
        return result

    def idle(self, result: ReplayResult) -> bool:
        return result.status == "infeasible"
