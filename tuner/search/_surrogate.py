"""The default strategy: two surrogates over feasible configurations only, a Gaussian process
and a random forest, whose acquisitions are taken in turn (SMAC-style, on a finite categorical
space).

* Proposals come from a candidate pool that holds only feasible configurations never proposed
  before: the whole feasible set when it can be listed (a recorded space, or a product of the
  domains small enough to filter with ``feasible``), otherwise random feasible draws plus every
  one-field change of the best configurations so far (a local search around the incumbents;
  ``tilewise.search._pool``).
* The first ``n_startup`` proposals are start-up draws: uniform over the pool, or with
  ``spread`` (the default strategy's) uniform among the candidates that take, in the
  most fields, a value used least so far (each field's values spread over the draws, as in a
  Latin hypercube), so that a few draws show the models each field at several values (uniform
  draws repeat values by chance) and the models start sooner. Then each step fits one of the
  models to log(time) of every evaluated configuration (failures count as the slowest time
  seen) and proposes the unseen candidate that scores best under the step's acquisition. The
  acquisitions, taken in turn from ``acquisitions``: ``ei``, the expected improvement under the
  spread of the forest's trees; ``local``, the best predicted of the unseen configurations one
  field away from the best so far (expected improvement when there is none); ``mean``, the best
  predicted time anywhere (greedy); ``parzen``, TPE's good/bad density ratio over the fields,
  which needs no model; ``gp-ei``, ``gp-local`` and ``gp-mean``, the same three from the
  Gaussian process (``tilewise.search._gp``).
* The default cycles ``gp-ei``, ``ei``, ``local`` (with ``bandit_top``, a bandit picks each
  step's instead: ``tilewise.search._bandit``). The GP interpolates along tile sizes from
  few evaluations (its length scales say which fields matter), which the forest's axis-aligned
  steps cannot do with ten or twenty points: it carries the first evaluations. The forest copes
  with failures, cliffs where a tile stops fitting, and interactions learnt from many points;
  the local step settles the fields neither model can tell apart around the incumbent. Either
  model alone lost somewhere (the README's search section): the GP alone on the rugged
  conv_MI250X space, the forest alone in the first 25 evaluations.
* What a proposal costs is bounded (the README's search section has the seconds): the forest
  is refitted every ``max(1, n // refit_divisor)`` evaluations (its predictions reused in
  between; in a shared study, where the study grows that much between two steps of a worker,
  a fit serves two of its steps); the GP's hyperparameters each time the evaluations grew by
  ``gp_refit_growth``, on at most ``gp_fit_max`` of them; in between, the GP's posterior over
  a listed pool is extended by the new evaluations (O(n) per candidate, not O(n^2)); past
  ``gp_max_entries`` numbers in that posterior the forest takes the GP's turns; a drawn pool (over
  ``enumerate_limit`` configurations) stays ``pool_size`` draws plus the incumbents' neighbours.
* In a study several workers share (a job's holder and its assistants, each with its own
  sampler), the GP's hyperparameters are fitted for the study: each fit is kept on the trial
  it was made for (``tilewise.search._shared_study``), and a worker takes the ones fitted to
  the most evaluations, so the refit rule holds for the study rather than for each worker; a
  fit another worker began for the same growth is not made again (the worker keeps its older
  hyperparameters meanwhile, or, with none yet, gives the step to the forest). Their
  evaluations complete out of order, and the posterior is extended by whichever are new to
  it. With ``shared_batch`` k above 1 (strategy ``surrogate-batch8``), a model step there also
  proposes for up to k - 1 of the other workers (one per other running trial; the
  acquisitions in turn, each configuration new), queued as waiting trials that their next
  asks take without a fit of their own: less CPU per evaluation, a little more staleness.
  Alone, nothing is queued and the search is what it was.

The forest's features are the tunables' values (numbers as they are, other choices by index),
plus two generic ones for tile sizes: the log-product and log-ratio of every pair of size-like
fields (tiles act through threads per block, elements per thread ...), and the alignment
(largest power of two dividing the value) of fields that are not all powers of two. The GP's
are the fields scaled to [0, 1] (sizes by log), one per field, so that a length scale is a
field's. Nothing in them is specific to one kernel or one recorded space.

Defaults of the class (10 start-up draws, ``gp-ei``, ``ei`` and ``local`` in turn, 32 trees,
half the features per split, leaves of 2) were chosen on recorded spaces over seeds 0-19 (the
README's search section has them, and the spread start-up's and the bandit's comparisons).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState
from threadpoolctl import ThreadpoolController

from tilewise.search._bandit import AcquisitionBandit
from tilewise.search._features import Config, forest_features, parzen_scores, unit_features
from tilewise.search._gp import GaussianProcess, PooledPosterior, extension_order
from tilewise.search._pool import CandidatePool
from tilewise.search._shared_study import FITTING_ATTR, THETA_ATTR, publish, read_history
from tilewise.search._space import SearchSpace

_BLAS = ThreadpoolController()

#: How the next configuration is picked from the forest's prediction: expected improvement,
#: the best predicted one-field change of the incumbent, the best predicted mean anywhere
#: (greedy), or TPE's density ratio (which ignores the forest); ``gp-`` + one of the first three:
#: the same from the Gaussian process's prediction.
GP_ACQUISITIONS = ("gp-ei", "gp-mean", "gp-local")
ACQUISITIONS = ("ei", "mean", "parzen", "local", *GP_ACQUISITIONS)


@dataclass(frozen=True)
class _Fit:
    candidates: list[Config]
    mean: np.ndarray
    std: np.ndarray


class SurrogateSampler(optuna.samplers.BaseSampler):
    """See the module docstring. Not thread-safe: one study, one thread."""

    def __init__(
        self,
        *,
        space: SearchSpace | None = None,
        seed: int | None = None,
        n_startup: int = 10,
        n_trees: int = 32,
        pool_size: int = 2048,
        enumerate_limit: int = 50_000,
        local_top: int = 5,
        refit_divisor: int = 50,
        pairs: bool = True,
        align: bool = True,
        max_features: float = 0.5,
        min_leaf: int = 2,
        acquisitions: Sequence[str] = ("gp-ei", "ei", "local"),
        good_fraction: float = 0.1,
        gp_refit_growth: float = 0.1,
        gp_fit_max: int = 200,
        gp_max_entries: int = 2**24,
        spread: bool = False,
        bandit_top: int | None = None,
        bandit_discount: float = 0.9,
        shared_batch: int = 1,
    ) -> None:
        unknown = set(acquisitions) - set(ACQUISITIONS)
        if not acquisitions or unknown:
            raise ValueError(f"acquisitions must be some of {ACQUISITIONS}, not {acquisitions}")
        self._space = space
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._n_startup, self._n_trees = n_startup, n_trees
        self._refit_divisor = refit_divisor
        self.pool = CandidatePool(
            space,
            self._rng,
            pool_size=pool_size,
            enumerate_limit=enumerate_limit,
            local_top=local_top,
        )
        self._forest_features = partial(forest_features, pairs=pairs, align=align)
        self._max_features, self._min_leaf = max_features, min_leaf
        self._acquisitions, self._good_fraction = tuple(acquisitions), good_fraction
        self._gp_refit_growth = gp_refit_growth
        self._gp_fit_max, self._gp_max_entries = gp_fit_max, gp_max_entries
        self._spread = spread
        self._shared_batch = shared_batch
        self._drawn_fit: _Fit | None = None  # the GP's over a drawn pool, for the same batch
        self._trial: tuple[Study, int] | None = None  # (study, trial id) being proposed
        #: Picks each step's acquisition by whether its proposals landed among the
        #: ``bandit_top`` best; without ``bandit_top`` the acquisitions take turns.
        self.bandit: AcquisitionBandit | None = None
        if bandit_top is not None:
            self.bandit = AcquisitionBandit(
                acquisitions, self._rng, top=bandit_top, discount=bandit_discount
            )
        self._posterior: PooledPosterior | None = None  # the GP over a listed pool
        self._posterior_configs: list[Config] = []  # ... conditioned on these, in this order
        #: Observations each hyperparameter fit saw, and how often the pool's posterior was
        #: conditioned afresh (not extended): what bounds the cost of a proposal.
        self.gp_fits: list[int] = []
        self.gp_conditioned_afresh = 0
        self.forest_fits: list[int] = []  # ... and the evaluations each forest fit saw
        self._gp_theta: np.ndarray | None = None  # the GP's last fitted hyperparameters
        self._gp_theta_n = 0  # ... and the evaluations they were fitted to
        self._fit_begun_at = 0  # the most evaluations a GP fit in the study began for
        self._model_steps = 0  # proposals made from the model, which pick the acquisition
        self._fit: _Fit | None = None
        self._listed_features: tuple[list[Config], np.ndarray] | None = None
        self._fitted_at = -1
        self._fit_reused = False  # the forest's fit served a step it was stale for (shared)

    @property
    def _names(self) -> tuple[str, ...]:
        """The searched fields of the current space, in order (the pool's)."""
        return self.pool.names

    # -- Optuna's sampler contract -----------------------------------------------------------
    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if self._space is not None:
            return dict(self._space.distributions)
        return optuna.search_space.intersection_search_space(
            study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        )

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        dists = {
            n: d
            for n, d in search_space.items()
            if isinstance(d, CategoricalDistribution) and not d.single()
        }
        if not dists:
            return {}
        names = tuple(sorted(dists))
        if names != self._names:
            self._fit, self._fitted_at = None, -1
            self._gp_theta, self._posterior = None, None
            self.pool.reset(names)  # configurations of another space
        if set(names) <= set(trial.system_attrs.get("fixed_params") or ()):
            return {}  # a queued trial: its configuration was proposed when it was queued
        full = {**{n: d for n, d in search_space.items() if d.single()}, **dists}
        # What the feasibility test sees of a configuration beside its searched fields: each
        # field's only (or first) choice, built once per proposal, not per screened tiling.
        base = {n: d.choices[0] for n, d in full.items() if isinstance(d, CategoricalDistribution)}
        seen, observed, running, shared, fit_begun = read_history(study, trial, names)
        if shared is not None and shared[0] > self._gp_theta_n:
            # Hyperparameters another worker of the study fitted to more evaluations than ours
            # were: the GP's refit rule then holds for the study, not for each of its workers.
            self._gp_theta, self._gp_theta_n = np.array(shared[1]), shared[0]
        self._fit_begun_at = fit_begun
        self._trial = (study, trial._trial_id)
        # One BLAS thread: the matrices here have a few hundred rows, which gain nothing from
        # more, and on a busy host BLAS threads spin waiting for each other (a 200 x 200
        # Cholesky factor took 0.6 s where it takes a millisecond).
        try:
            with _BLAS.limit(limits=1, user_api="blas"):
                configs = self._propose_batch(base, dists, seen, observed, running)
        finally:
            self._trial = None  # a fit outside this proposal publishes on no trial
        for config in configs[1:]:
            study.enqueue_trial(dict(zip(names, config, strict=True)))
        return dict(zip(names, configs[0], strict=True)) if configs else {}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    # -- proposals ---------------------------------------------------------------------------
    def _publish(self, attr: str, **value: Any) -> None:
        """Keep ``value`` on the trial being proposed, for the study's other workers."""
        if self._trial is not None:
            publish(*self._trial, attr, self._names, **value)

    def _gp_fit_due(self, n: int) -> bool:
        """Whether the GP's hyperparameters are to be fitted for ``n`` evaluations: when they
        grew by ``gp_refit_growth`` since the last fit, and no other worker of the study began
        a fit within that growth. The study's workers take their evaluations from devices of
        one speed, so they propose at about the same moments, before one's fit is published:
        each would fit the same hyperparameters at once. One does; the others keep theirs (at
        most one growth step old) or, having none yet, give the step to the forest."""
        growth = 1 + self._gp_refit_growth
        if self._gp_theta is not None and n < self._gp_theta_n * growth:
            return False
        return self._fit_begun_at * growth <= n

    def _propose_batch(
        self,
        base: Mapping[str, Any],
        dists: Mapping[str, CategoricalDistribution],
        seen: set[Config],
        observed: list[tuple[Config, float]],
        others: int,
    ) -> list[Config]:
        """This trial's configuration, then, in a study shared with ``others`` running workers,
        one for each of them up to ``shared_batch`` in all: the next proposals of the same
        models (the acquisitions in turn, each configuration new), so that one fit serves them
        all."""
        configs: list[Config] = []
        self._drawn_fit = None
        for _ in range(max(1, min(1 + others, self._shared_batch))):
            # The later ones choose from the pool the first drew: its models are those fitted.
            self.pool.reuse_draws = bool(configs)
            config = self._propose(base, dists, seen, observed, others)
            if config is None:
                break
            configs.append(config)
            seen.add(config)
        self.pool.reuse_draws = False
        return configs

    def _propose(
        self,
        base: Mapping[str, Any],
        dists: Mapping[str, CategoricalDistribution],
        seen: set[Config],
        observed: list[tuple[Config, float]],
        others: int,
    ) -> Config | None:
        self.pool.prepare(base, dists)
        finite = [v for _, v in observed if math.isfinite(v) and v > 0]
        if len(observed) < self._n_startup or not finite:
            start = self.pool.spread if self._spread else self.pool.uniform
            return start(base, dists, seen)
        if self.bandit is None:
            acquisition = self._acquisitions[self._model_steps % len(self._acquisitions)]
            self._model_steps += 1
        else:
            self.bandit.settle(observed)
            acquisition = self.bandit.choose()
        chosen = acquisition
        n = len(observed)
        if acquisition in GP_ACQUISITIONS and (
            not self._gp_affordable(n) or (self._gp_theta is None and not self._gp_fit_due(n))
        ):
            acquisition = acquisition.removeprefix("gp-")  # the forest's turn instead
        if acquisition in GP_ACQUISITIONS:
            fit = self._gp_model(
                dists, lambda: self.pool.candidates(base, dists, seen, observed), observed, others
            )
            acquisition = acquisition.removeprefix("gp-")
        else:
            if self._fit is None or self._refit_forest(n, others):
                candidates, features = self._forest_candidates(base, dists, seen, observed)
                self._fit = self._model(dists, candidates, features, observed)
                self._fitted_at, self._fit_reused = n, False
                self.forest_fits.append(n)
            fit = self._fit
        config = self._best_by(acquisition, fit, dists, seen, observed)
        config = config if config is not None else self.pool.uniform(base, dists, seen)
        if self.bandit is not None and config is not None:
            self.bandit.proposed(config, chosen)
        return config

    def _refit_forest(self, n: int, others: int) -> bool:
        """Whether this step refits the forest for ``n`` evaluations: when they grew by
        ``n // refit_divisor`` since its fit. In a study ``others`` running workers share, it
        grows by about one evaluation per worker between two proposals of this one, so the
        growth rule alone refits at every forest step of every worker (at 64 workers, all of
        them at about the same moment while the devices wait): there a stale fit serves one
        more step (noted here, so that the next stale step refits), unless the study grew by
        ``4 * others`` since it was made (this worker was slow, or the others quick). Alone,
        the growth rule as it was."""
        grown = n - self._fitted_at
        if grown < max(1, n // self._refit_divisor):
            return False
        if others > 0 and not self._fit_reused and grown < 4 * others:
            self._fit_reused = True
            return False
        return True

    def _gp_affordable(self, n: int) -> bool:
        """Whether the GP still takes its turns with ``n`` evaluations: while its posterior over
        a listed pool holds at most ``gp_max_entries`` numbers (n x pool size), and on a
        drawn pool up to 1,000 evaluations. Past that the forest, whose cost grows as n log n,
        carries on alone: the GP's strength is in the first evaluations."""
        if self.pool.listed is not None:
            return n * len(self.pool.listed) <= self._gp_max_entries
        return n <= 1000

    def _forest_candidates(
        self,
        base: Mapping[str, Any],
        dists: Mapping[str, CategoricalDistribution],
        seen: set[Config],
        observed: list[tuple[Config, float]],
    ) -> tuple[list[Config], np.ndarray]:
        """A forest step's candidates and their features, a listed pool's computed once per
        space (a recorded space can list 100,000 configurations)."""
        listed = self.pool.listed
        if listed is None:
            candidates = self.pool.candidates(base, dists, seen, observed)
            return candidates, self._forest_features(self._names, dists, candidates)
        if self._listed_features is None or self._listed_features[0] is not listed:
            self._listed_features = (listed, self._forest_features(self._names, dists, listed))
        unseen = np.fromiter((c not in seen for c in listed), dtype=bool, count=len(listed))
        return list(itertools.compress(listed, unseen)), self._listed_features[1][unseen]

    def _model(
        self,
        dists: Mapping[str, CategoricalDistribution],
        candidates: list[Config],
        features: np.ndarray,
        observed: list[tuple[Config, float]],
    ) -> _Fit:
        """The forest's prediction (mean and spread of log time) for every candidate, whose
        ``features`` are given."""
        from sklearn.ensemble import RandomForestRegressor

        if not candidates:
            return _Fit([], np.empty(0), np.empty(0))
        x = self._forest_features(self._names, dists, [c for c, _ in observed])
        y = _log_times(observed)
        forest = RandomForestRegressor(
            bootstrap=True,
            n_estimators=self._n_trees,
            max_features=self._max_features,
            min_samples_leaf=self._min_leaf,
            random_state=int(self._rng.integers(2**31)),
        ).fit(x, y)
        per_tree = np.stack([tree.predict(features) for tree in forest.estimators_])
        return _Fit(candidates, per_tree.mean(axis=0), np.maximum(per_tree.std(axis=0), 1e-9))

    def _gp_model(
        self,
        dists: Mapping[str, CategoricalDistribution],
        candidates: Callable[[], list[Config]],
        observed: list[tuple[Config, float]],
        others: int,
    ) -> _Fit:
        """The GP's prediction (mean and spread of log time) for every candidate.

        Its hyperparameters are fitted again once the evaluations have grown by
        ``gp_refit_growth`` since the last fit, to at most ``gp_fit_max`` of them (a random
        subset beyond: the fit costs O(n^3) per optimizer step, and a few hundred points pin
        down a length scale per field). In between, on a listed pool, the posterior over the
        whole pool is extended by the new evaluations (:class:`PooledPosterior`, O(n) per
        candidate where conditioning afresh costs O(n^2)); on a pool drawn anew at every step
        the GP conditions on every evaluation with the last hyperparameters.
        """
        n = len(observed)
        x = unit_features(self._names, dists, [c for c, _ in observed])
        y = _log_times(observed)
        if self._gp_fit_due(n):
            if others:  # the study's other workers see that this fit began
                self._publish(FITTING_ATTR, n=n)
            subset = (
                np.sort(self._rng.choice(n, self._gp_fit_max, replace=False))
                if n > self._gp_fit_max
                else np.arange(n)
            )
            self._gp_theta = GaussianProcess(x[subset], y[subset], rng=self._rng).theta
            self._gp_theta_n = n
            self._publish(THETA_ATTR, n=n, theta=self._gp_theta.tolist())
            self.gp_fits.append(len(subset))
        # Without hyperparameters and no fit due, the step was the forest's (_propose).
        assert self._gp_theta is not None
        listed = self.pool.listed
        if listed is None:
            if self.pool.reuse_draws and self._drawn_fit is not None:
                return self._drawn_fit  # a batch's: the same evaluations, pool and theta
            pool = candidates()
            if not pool:
                return _Fit([], np.empty(0), np.empty(0))
            gp = GaussianProcess(x, y, theta=self._gp_theta)
            mean, std = gp.predict(unit_features(self._names, dists, pool))
            self._drawn_fit = _Fit(pool, mean, np.maximum(std, 1e-9))
            return self._drawn_fit
        configs = [c for c, _ in observed]
        post, known = self._posterior, self._posterior_configs
        # Evaluations of a shared study complete out of order: the posterior is extended by
        # whichever are new to it, in its own order of the evaluations.
        order = extension_order(known, configs) if post is not None else None
        if post is None or post.theta is not self._gp_theta or order is None:
            post = PooledPosterior(self._gp_theta, unit_features(self._names, dists, listed))
            self._posterior, known, order = post, [], list(range(n))
            self.gp_conditioned_afresh += 1
        post.add(x[order[len(known) :]])
        self._posterior_configs = [configs[i] for i in order]
        mean, std = post.predict(y[order])
        return _Fit(listed, mean, np.maximum(std, 1e-9))

    def _best_by(
        self,
        acquisition: str,
        fit: _Fit,
        dists: Mapping[str, CategoricalDistribution],
        seen: set[Config],
        observed: list[tuple[Config, float]],
    ) -> Config | None:
        """The unseen candidate of ``fit`` that scores highest under ``acquisition``."""
        from scipy.special import ndtr

        fresh = np.array([c not in seen for c in fit.candidates], dtype=bool)
        if not fresh.any():
            return None
        if acquisition == "ei":
            best = min(math.log(v) for _, v in observed if math.isfinite(v) and v > 0)
            gain = best - fit.mean
            z = gain / fit.std
            score = gain * ndtr(z) + fit.std * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        elif acquisition == "mean":
            score = -fit.mean
        elif acquisition == "local":
            incumbent = min(observed, key=lambda o: o[1] if math.isfinite(o[1]) else math.inf)[0]
            # Membership in the incumbent's one-field changes: a set lookup per candidate, where
            # comparing every candidate field by field took 5 of 37 s of a 300-evaluation replay.
            changes = set(self.pool.one_field_changes(dists, incumbent))
            near = np.fromiter(
                (c in changes for c in fit.candidates), dtype=bool, count=len(fit.candidates)
            )
            if not (near & fresh).any():
                return self._best_by("ei", fit, dists, seen, observed)
            score = np.where(near, -fit.mean, -np.inf)
        else:
            score = parzen_scores(self._names, dists, fit.candidates, observed, self._good_fraction)
        score = np.where(fresh, score, -np.inf)
        return fit.candidates[int(np.argmax(score))]


def _log_times(observed: Sequence[tuple[Config, float]]) -> np.ndarray:
    """log(time) of each evaluation; a failure counts as the slowest time seen."""
    finite = [v for _, v in observed if math.isfinite(v) and v > 0]
    worst = math.log(max(finite))
    return np.array([math.log(v) if math.isfinite(v) and v > 0 else worst for _, v in observed])
