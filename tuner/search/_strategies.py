"""Search strategies: Optuna samplers found by name through one registry table.

A strategy is an ``optuna.samplers.BaseSampler``, so the same object drives ``tilewise tune``
(the Tuner) and ``tilewise bench search`` (the replay target). What a strategy may know before
it evaluates anything is a :class:`~tilewise.search._space.SearchSpace`: the distributions and,
optionally, a ``feasible`` predicate (the op's static check, or a recorded space's restrictions)
and the full list of feasible configurations when it is small enough to list.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import optuna

from tilewise.errors import ConfigError, InputError, did_you_mean
from tilewise.search._space import SearchSpace

Factory = Callable[[int | None, SearchSpace | None], optuna.samplers.BaseSampler]


def _random(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _tpe(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed)


def _tpe_multivariate(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # tilewise's sampler before the surrogate: the joint model of tiling fields that interact.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8
        )


def _gp(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError(
            "strategy 'gp' is Optuna's GPSampler, which needs PyTorch: pip install torch"
        ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed)


def _surrogate(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, spread=True)


def _surrogate_spread5(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # Half as many spread start-up draws: faster on some spaces, slower on others (see the
    # README's search section).
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, n_startup=5, spread=True)


def _surrogate_gp10(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The default before spread start-up draws: as many (10), uniform, then the same models.
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed)


def _surrogate_forest(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The default before the GP: the forest alone, expected improvement and local steps in
    # turn (kept to show what the GP adds; see the README's search section).
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, acquisitions=("ei", "local"))


def _surrogate_ei(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The default before local steps: 15 start-up draws, then the forest's expected
    # improvement alone.
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, n_startup=15, acquisitions=("ei",))


def _surrogate_mix(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The same forest, 10 start-up draws, then expected improvement and the best predicted
    # mean anywhere in turn: greedier than the default's local steps, which pays on small
    # spaces and costs on large rugged ones (see the README's search table).
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, n_startup=10, acquisitions=("ei", "mean"))


def _surrogate_bandit(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The default's start-up and acquisitions, but a bandit picks each step's acquisition by
    # whether its proposals landed among the five best so far, instead of a fixed cycle (see
    # the README's search section: not ahead of the cycle on the spaces measured).
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, spread=True, bandit_top=5)


def _surrogate_batch8(seed: int | None, space: SearchSpace | None) -> optuna.samplers.BaseSampler:
    # The default, but in a study other workers share a model step proposes for up to 7 of
    # them as well (queued trials), for hosts where many workers share few cores: with 32
    # workers on one study a quarter of the sampler's CPU per ask, at some 20% more
    # evaluations to 5% of the optimum (bench/shared_study.py; the README's fleet section).
    from tilewise.search._surrogate import SurrogateSampler

    return SurrogateSampler(space=space, seed=seed, spread=True, shared_batch=8)


#: strategy name -> factory(seed, space). "default" is what ``tilewise tune`` uses.
STRATEGIES: dict[str, Factory] = {
    "default": _surrogate,
    "surrogate-bandit": _surrogate_bandit,
    "surrogate-batch8": _surrogate_batch8,
    "surrogate-gp10": _surrogate_gp10,
    "surrogate-spread5": _surrogate_spread5,
    "surrogate-forest": _surrogate_forest,
    "surrogate-ei": _surrogate_ei,
    "surrogate-mix": _surrogate_mix,
    "random": _random,
    "tpe": _tpe,
    "tpe-multivariate": _tpe_multivariate,
    "gp": _gp,
}


def make_sampler(
    seed: int | None, *, strategy: str = "default", space: SearchSpace | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler of ``strategy`` (see :data:`STRATEGIES`); an unknown name is an InputError."""
    check_strategy(strategy)
    return STRATEGIES[strategy](seed, space)


def check_strategy(strategy: str) -> None:
    """An InputError, with a did-you-mean hint, unless ``strategy`` names a strategy."""
    if strategy not in STRATEGIES:
        raise InputError(
            f"unknown strategy {strategy!r}{did_you_mean(strategy, STRATEGIES)}; "
            f"known: {', '.join(sorted(STRATEGIES))}"
        )


def preload(strategy: str) -> None:
    """Import now what a tune with ``strategy`` imports on its first use: the surrogate's models
    (scikit-learn's forest, SciPy's normal distribution) and the finish's significance test
    (SciPy's statistics), seconds of CPU on a small machine. A worker calls it at start, so
    that its first job does not pay for it within its lease; ``tilewise tune`` and the CLI's
    other commands keep them lazy."""
    check_strategy(strategy)
    import scipy.stats

    if strategy == "default" or strategy.startswith("surrogate-"):
        import scipy.special  # noqa: F401
        import sklearn.ensemble  # noqa: F401
