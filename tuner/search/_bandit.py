"""Which acquisition a model step takes: a bandit over the surrogate's acquisitions.

A fixed turn cycle gives every acquisition the same share on every space, though which one
finds better configurations differs from space to space (the GP's expected improvement on
smooth tile-size trends, the forest's on cliffs and failures, the local step once the basin is
found) and along a run. :class:`AcquisitionBandit` chooses each step's acquisition by Thompson
sampling on how often each one's proposals succeeded: a proposal succeeds when it lands among
the ``top`` best evaluations so far (a denser signal than improving on the best, which is rare
after the first few dozen evaluations, yet one that only proposals in the good region earn).
Successes and failures are discounted at every step (by ``discount``), so the shares follow the
run: what paid off twenty steps ago weighs less than what paid off now. Each acquisition starts
from a uniform prior and takes one turn, in order, before any sampling, so none is dropped
untried.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


class AcquisitionBandit:
    """Discounted Beta-Bernoulli Thompson sampling over ``arms`` (acquisition names); a
    proposal succeeds when it lands among the ``top`` best evaluations so far."""

    def __init__(
        self,
        arms: Sequence[str],
        rng: np.random.Generator,
        *,
        top: int = 5,
        discount: float = 0.9,
    ) -> None:
        if not arms:
            raise ValueError("a bandit needs at least one arm")
        if top < 1:
            raise ValueError(f"top must be at least 1, not {top}")
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"discount must be in (0, 1], not {discount}")
        self.arms = tuple(arms)
        self._rng, self._top, self._discount = rng, top, discount
        self.successes = np.zeros(len(self.arms))
        self.failures = np.zeros(len(self.arms))
        self.pulls = np.zeros(len(self.arms), dtype=int)  # undiscounted: what was chosen
        self._pending: dict[Hashable, str] = {}  # proposals not yet evaluated, and their arm

    def proposed(self, config: Hashable, arm: str) -> None:
        """``arm`` proposed ``config``: scored by :meth:`settle` once it is evaluated."""
        self._pending[config] = arm

    def settle(self, observed: Sequence[tuple[Hashable, float]]) -> None:
        """Score every pending proposal that ``observed`` (in evaluation order) now holds,
        against the evaluations before it."""
        for i, (config, value) in enumerate(observed):
            if config in self._pending:
                earlier = [v for _, v in observed[:i]]
                self.update(self._pending.pop(config), landed_in_top(value, earlier, self._top))

    def choose(self) -> str:
        untried = np.flatnonzero(self.pulls == 0)
        if untried.size:
            index = int(untried[0])
        else:
            draws = self._rng.beta(1.0 + self.successes, 1.0 + self.failures)
            index = int(np.argmax(draws))
        self.pulls[index] += 1
        return self.arms[index]

    def update(self, arm: str, success: bool) -> None:
        """Discount every arm's record, then count ``arm``'s outcome."""
        self.successes *= self._discount
        self.failures *= self._discount
        index = self.arms.index(arm)
        if success:
            self.successes[index] += 1.0
        else:
            self.failures[index] += 1.0


def landed_in_top(value: float, earlier: Sequence[float], top: int) -> bool:
    """Whether ``value`` (a time; not finite for a failure) is better than all but at most
    ``top - 1`` of the ``earlier`` evaluations: among the best ``top`` once it is added."""
    if not np.isfinite(value) or value <= 0:
        return False
    better = sum(1 for v in earlier if np.isfinite(v) and 0 < v <= value)
    return better < top
