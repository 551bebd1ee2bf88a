"""The configurations the default strategy proposes from (:class:`CandidatePool`).

Only feasible configurations never proposed before: the whole feasible set when it can be
listed (a recorded space, or a product of the domains small enough to filter with
``feasible``) and holds at most ``enumerate_limit`` configurations, otherwise random feasible
draws (from the list where there is one) plus every one-field change of the best
configurations so far (a local search around the incumbents). The start-up proposals are drawn
from it too, uniformly or spread over each field's values.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import CategoricalDistribution

from tilewise.search._features import Config
from tilewise.search._space import SearchSpace

Dists = Mapping[str, CategoricalDistribution]


class CandidatePool:
    """The candidates of one search space (its fields ``names``, in order) for a sampler.

    ``rng`` is the sampler's own generator: the pool draws from it in the sampler's order of
    calls, so a seed gives the same proposals."""

    def __init__(
        self,
        space: SearchSpace | None,
        rng: np.random.Generator,
        *,
        pool_size: int,
        enumerate_limit: int,
        local_top: int,
    ) -> None:
        self._space, self._rng = space, rng
        self._pool_size, self._enumerate_limit = pool_size, enumerate_limit
        self._local_top = local_top
        self.names: tuple[str, ...] = ()
        #: The whole feasible set when it could be listed, else None (drawn instead).
        self.listed: list[Config] | None = None
        #: A feasible set listed but too large to score whole: draws come from it.
        self._source: list[Config] | None = None
        self._listed_ready = False
        #: The newest ``pool_size`` random draws of a space too large to list.
        self.drawn: list[Config] | None = None
        #: A batch's later proposals choose from the draws its first made (no fresh draws).
        self.reuse_draws = False
        self._pool_codes: tuple[list[Config], np.ndarray, list[list[Any]]] | None = None

    def reset(self, names: tuple[str, ...]) -> None:
        """Start over for the space of ``names``: nothing listed or drawn yet."""
        self.names, self.listed, self._listed_ready, self.drawn = names, None, False, None
        self._source = None
        self._pool_codes = None

    def prepare(self, base: Mapping[str, Any], dists: Dists) -> None:
        """List the feasible set once per space, where it can be listed."""
        if not self._listed_ready:
            self.listed, self._listed_ready = self._list(base, dists), True

    def feasible(self, base: Mapping[str, Any], config: Config) -> bool:
        if self._space is None or self._space.feasible is None:
            return True
        params = dict(base)
        params.update(zip(self.names, config, strict=True))
        return self._space.feasible(params)

    def _list(self, base: Mapping[str, Any], dists: Dists) -> list[Config] | None:
        if self._space is not None and self._space.candidates is not None:
            allowed = {n: set(d.choices) for n, d in dists.items()}
            listed = [
                tuple(c[n] for n in self.names)
                for c in self._space.candidates()
                if all(c.get(n) in allowed[n] for n in self.names)
            ]
            if len(listed) <= self._enumerate_limit:
                return listed
            # Scoring every configuration at every step costs a proposal seconds on a space
            # of millions; drawn from, it costs what a product space's pool does.
            self._source = listed
            return None
        size = math.prod(len(dists[n].choices) for n in self.names)
        if size > self._enumerate_limit:
            return None
        product = itertools.product(*(dists[n].choices for n in self.names))
        return [c for c in product if self.feasible(base, c)]

    def draw(self, base: Mapping[str, Any], dists: Dists) -> list[Config]:
        """Random feasible configurations of a space too large to list or to score whole.

        Each call draws up to an eighth of ``pool_size`` fresh ones and keeps the newest
        ``pool_size``: the pool fills over the first eight proposals (start-up draws, which
        need no more than that) and is refreshed by an eighth at each later one, so the static
        check (the cost of screening) is paid for an eighth of the pool per proposal. A worker
        joining a shared study pays no more at its first proposal: 64 workers that start at
        once would otherwise each screen a whole pool while their devices wait.
        """
        if self.reuse_draws and self.drawn is not None:
            return self.drawn
        wanted = max(1, self._pool_size // 8)
        found: list[Config] = []
        if self._source is not None:
            found = [self._source[i] for i in self._rng.integers(len(self._source), size=wanted)]
        else:
            draws = [self._rng.integers(len(dists[n].choices), size=4 * wanted) for n in self.names]
            for row in zip(*draws, strict=True):
                config = tuple(dists[n].choices[i] for n, i in zip(self.names, row, strict=True))
                if self.feasible(base, config):
                    found.append(config)
                    if len(found) >= wanted:
                        break
        # The newest ``pool_size`` only: a pool that grew with every proposal made each model
        # step (and each forest prediction) dearer the longer the search ran.
        merged = list(dict.fromkeys([*(self.drawn or []), *found]))
        self.drawn = merged[-self._pool_size :]
        return self.drawn

    def candidates(
        self,
        base: Mapping[str, Any],
        dists: Dists,
        seen: set[Config],
        observed: Sequence[tuple[Config, float]],
    ) -> list[Config]:
        """The unseen configurations a model step chooses from."""
        if self.listed is not None:
            return [c for c in self.listed if c not in seen]
        pool = self.draw(base, dists) + self._neighbours(base, dists, observed)
        return list(dict.fromkeys(c for c in pool if c not in seen))

    def _neighbours(
        self, base: Mapping[str, Any], dists: Dists, observed: Sequence[tuple[Config, float]]
    ) -> list[Config]:
        return [
            changed
            for config, _ in sorted(observed, key=lambda o: o[1])[: self._local_top]
            for changed in self.one_field_changes(dists, config)
            if self.feasible(base, changed)
        ]

    def one_field_changes(self, dists: Dists, config: Config) -> list[Config]:
        """Every configuration that differs from ``config`` in one field, field by field."""
        return [
            (*config[:i], value, *config[i + 1 :])
            for i, n in enumerate(self.names)
            for value in dists[n].choices
            if value != config[i]
        ]

    def spread(self, base: Mapping[str, Any], dists: Dists, seen: set[Config]) -> Config | None:
        """A start-up proposal: uniform among the unseen candidates that take, in the most
        fields, one of the values used least so far (a Latin-hypercube-like spread over each
        field's values, within the feasible configurations), so that the first models see
        every field at several values."""
        pool = self.listed if self.listed is not None else self.draw(base, dists)
        unseen = np.fromiter((c not in seen for c in pool), dtype=bool, count=len(pool))
        if not unseen.any():
            return None
        # Per field, how often each candidate's value was used so far, as arrays over the
        # pool's value codes: a listed pool can hold 100,000 configurations.
        codes, values = self._codes(pool)
        used = np.empty(codes.shape, dtype=np.int64)
        for i in range(len(self.names)):
            counts = Counter(c[i] for c in seen)
            used[:, i] = np.array([counts[v] for v in values[i]], dtype=np.int64)[codes[:, i]]
        used = used[unseen]
        score = (used == used.min(axis=0)).sum(axis=1)
        top = np.flatnonzero(score == score.max())
        return pool[int(np.flatnonzero(unseen)[top[self._rng.integers(len(top))]])]

    def _codes(self, pool: list[Config]) -> tuple[np.ndarray, list[list[Any]]]:
        """Each field of ``pool`` as indices into that field's distinct values; a listed
        pool's are kept."""
        if self._pool_codes is not None and self._pool_codes[0] is pool:
            return self._pool_codes[1], self._pool_codes[2]
        values: list[list[Any]] = []
        codes = np.empty((len(pool), len(self.names)), dtype=np.int64)
        for i in range(len(self.names)):
            index: dict[Any, int] = {}
            codes[:, i] = [index.setdefault(c[i], len(index)) for c in pool]
            values.append(list(index))
        if pool is self.listed:
            self._pool_codes = (pool, codes, values)
        return codes, values

    def uniform(self, base: Mapping[str, Any], dists: Dists, seen: set[Config]) -> Config | None:
        """An unseen candidate drawn uniformly (of a drawn pool: its first unseen draw)."""
        if self.listed is not None:
            fresh = [c for c in self.listed if c not in seen]
            return fresh[int(self._rng.integers(len(fresh)))] if fresh else None
        fresh = [c for c in self.draw(base, dists) if c not in seen]
        return fresh[0] if fresh else None
