"""The ask-and-tell loop of every search: the Tuner's on a backend, ``replay_search``'s on a
recorded space.

One proposal at a time, the study is asked for a configuration, and:

* a configuration proposed before is not evaluated again: the study is told its earlier
  outcome for free;
* one that another process is evaluating at that moment is told as failed (its own record will
  tell), without an evaluation;
* any other is evaluated. A configuration without a time (it failed, or broke the
  restrictions) is told as ``inf`` with its constraints (:func:`set_constraints`), so the
  sampler learns to stay away from it.

The loop ends when the budget's evaluations are spent, after ``25 * budget + 200`` proposals,
after more than :data:`MAX_IDLE` proposals in a row that evaluated nothing (the space is
exhausted), or when the search says so (:meth:`AskTellLoop.should_end`: a time limit, a job's
budget, a stop request).
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState

from tilewise.search._timing import ProposeTimes, TimedSampler

log = logging.getLogger(__name__)

#: Proposals in a row without an evaluation after which the space counts as exhausted.
MAX_IDLE = 100
#: The loop asks for at most this many proposals per evaluation of the budget, plus EXTRA.
PROPOSALS_PER_EVALUATION = 25
EXTRA_PROPOSALS = 200


class Told(Protocol):
    """What the study is told of an evaluated configuration."""

    @property
    def value(self) -> float | None:
        """The time to minimise; None when there is none (told as ``inf``)."""
        ...

    @property
    def constraints(self) -> Mapping[str, float]:
        """Constraint values in Optuna's sense: > 0 violated."""
        ...


class Counts(Protocol):
    """The counters a loop keeps up to date for its search's report."""

    proposals: int
    duplicates: int
    propose: ProposeTimes


def set_constraints(trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
    """Tell Optuna how far ``trial`` is from feasible (> 0: infeasible; the record keeps the
    values per reason).

    Every trial carries the one constraint ``violation``, the sum of the positive values:
    samplers that model constraints (Optuna's GPSampler) refuse trials whose constraint sets
    differ, and TPE scores an infeasible trial by this very sum.
    """
    trial.set_constraint("violation", sum(v for v in constraints.values() if v > 0))


K = TypeVar("K", bound=Hashable)
R = TypeVar("R", bound=Told)


class AskTellLoop(ABC, Generic[K, R]):
    """One search's loop over ``study`` (see the module docstring).

    A search says what identifies a configuration (:meth:`key`), how one is evaluated
    (:meth:`evaluate`) and how many evaluations it has spent (:meth:`spent`); ``seen`` holds
    the outcomes known before the loop starts and gains every one evaluated in it.
    """

    def __init__(
        self,
        study: optuna.Study,
        distributions: Mapping[str, BaseDistribution],
        *,
        budget: int,
        seen: dict[K, R],
        counts: Counts,
    ) -> None:
        self.study, self.distributions = study, dict(distributions)
        self.budget, self.seen, self.counts = budget, seen, counts
        # The sampler's own seconds per proposal (the storage's are not the strategy's).
        sampler = study.sampler
        if not isinstance(sampler, TimedSampler):
            sampler = study.sampler = TimedSampler(sampler)
        self.timer = sampler

    @abstractmethod
    def key(self, params: Mapping[str, Any]) -> K:
        """The identity of a proposed configuration."""

    @abstractmethod
    def evaluate(self, trial: optuna.Trial) -> R:
        """Evaluate the configuration ``trial`` proposes."""

    @abstractmethod
    def spent(self) -> int:
        """Evaluations spent so far against the budget."""

    def should_end(self) -> bool:
        """Checked before every proposal: whether the search ends now."""
        return False

    def running_elsewhere(self, trial: optuna.Trial) -> bool:
        """Whether another process is evaluating the configuration of ``trial`` now."""
        return False

    def idle(self, result: R) -> bool:
        """Whether an evaluated configuration still spent no evaluation (it broke the
        restrictions of a recorded space, say): it counts towards :data:`MAX_IDLE`."""
        return False

    def told(self) -> None:
        """Called after every proposal the study was told of: progress callbacks."""

    def run(self) -> None:
        """Ask, evaluate and tell until the loop ends (see the module docstring)."""
        max_proposals = PROPOSALS_PER_EVALUATION * self.budget + EXTRA_PROPOSALS
        idle = 0
        while self.spent() < self.budget and self.counts.proposals < max_proposals:
            if self.should_end():
                return
            self.counts.proposals += 1
            wall, cpu = self.timer.seconds, self.timer.cpu_seconds
            trial = self.study.ask(self.distributions)
            key = self.key(trial.params)
            if key in self.seen:
                result = self.seen[key]
                self.counts.duplicates += 1
                idle += 1
            elif self.running_elsewhere(trial):
                self.counts.duplicates += 1
                idle += 1
                self.study.tell(trial, state=TrialState.FAIL)
                self._timed(wall, cpu)
                self.told()
                continue
            else:
                try:
                    result = self.seen[key] = self.evaluate(trial)
                except BaseException:
                    self._abandon(trial)
                    raise
                idle = idle + 1 if self.idle(result) else 0
            set_constraints(trial, result.constraints)
            self.study.tell(trial, result.value if result.value is not None else math.inf)
            self._timed(wall, cpu)
            self.told()
            if idle > MAX_IDLE:
                log.info("%d proposals in a row evaluated nothing: space exhausted", idle)
                return

    def _abandon(self, trial: optuna.Trial) -> None:
        """End a trial whose evaluation raised (the backend failed, a second Ctrl-C): left
        running, it would count as in flight for every later run of the study, and a queued
        configuration (the default a tune measures first) would not be queued again. It fails,
        and a queued one is queued anew, for the next run to measure first."""
        try:
            fixed = self.study._storage.get_trial(trial._trial_id).system_attrs.get("fixed_params")
            self.study.tell(trial, state=TrialState.FAIL)
            if fixed:
                self.study.enqueue_trial(fixed)
        except Exception as exc:  # the study's database may be what failed
            log.warning("trial %d left running: %s", trial.number, exc)

    def _timed(self, wall: float, cpu: float) -> None:
        """Add the sampler's seconds since (``wall``, ``cpu``) as one proposal's."""
        self.counts.propose.add(self.timer.seconds - wall, self.timer.cpu_seconds - cpu)
