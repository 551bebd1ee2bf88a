"""The surrogate strategy in a study several workers share: the GP's hyperparameters are
fitted for the study, evaluations that complete out of order extend the GP's posterior instead
of conditioning it afresh, and with ``shared_batch`` one model step proposes for the other
workers too (queued trials they take without a fit of their own)."""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.tuner.search.bowl import bowl_space
from tilewise.search import ReplaySpace, replay_search
from tilewise.search._bench import search_space_of
from tilewise.search._gp import extension_order
from tilewise.search._shared_study import FITTING_ATTR
from tilewise.search._surrogate import SurrogateSampler


def _config(trial: optuna.trial.FrozenTrial | optuna.Trial) -> tuple[int, ...]:
    params = trial.params
    return tuple(params[n] for n in ("a", "b", "c"))


def _tell(study: optuna.Study, space: ReplaySpace, trial: optuna.Trial) -> None:
    study.tell(trial, space.evaluate(trial.params).value)


def _workers(
    space: ReplaySpace, samplers: list[SurrogateSampler], proposals: int, seed: int = 0
) -> optuna.Study:
    """``len(samplers)`` workers on one study: each asks in turn, and a trial is told once
    every worker has one running, a random one of those (completions out of order)."""
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="shared")
    studies = [optuna.load_study(study_name="shared", storage=storage, sampler=s) for s in samplers]
    order = random.Random(seed)
    running: list[optuna.Trial] = []
    for i in range(proposals):
        running.append(studies[i % len(studies)].ask(space.distributions))
        if len(running) == len(studies):
            _tell(studies[0], space, running.pop(order.randrange(len(running))))
    return studies[0]


def test_a_model_step_queues_a_proposal_for_each_other_worker(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(space=search_space_of(space), seed=0, spread=True, shared_batch=4)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="shared", sampler=sampler)
    for _ in range(12):  # past the start-up draws, alone: nothing queued
        _tell(study, space, study.ask(space.distributions))
    assert not study.get_trials(states=(TrialState.WAITING,))
    # Five other workers evaluating, proposed by another sampler.
    elsewhere = optuna.load_study(
        study_name="shared", storage=storage, sampler=optuna.samplers.RandomSampler(seed=1)
    )
    others = [elsewhere.ask(space.distributions) for _ in range(5)]
    mine = study.ask(space.distributions)
    queued = study.get_trials(states=(TrialState.WAITING,))
    # One each for three of them: four proposals from one fit (shared_batch).
    assert len(queued) == 3
    configs = [tuple(t.system_attrs["fixed_params"][n] for n in ("a", "b", "c")) for t in queued]
    before = {_config(t) for t in study.get_trials() if t.state != TrialState.WAITING}
    assert len(set(configs)) == 3 and not set(configs) & before
    assert _config(mine) not in configs
    # The next worker to ask takes a queued proposal, without the sampler.
    fits = (len(sampler.gp_fits), sampler._fitted_at)
    taken = study.ask(space.distributions)
    assert _config(taken) == configs[0]
    assert (len(sampler.gp_fits), sampler._fitted_at) == fits
    assert [_config(study.ask(space.distributions)) for _ in configs[1:]] == configs[1:]
    for trial in others:
        _tell(study, space, trial)


@pytest.mark.parametrize("seed", range(8))
def test_a_proposal_knows_the_queued_ones(tmp_path: Path, seed: int) -> None:
    """Two workers may ask at once: the second's sampler runs while the first's queued
    proposals wait, and proposes none of them again."""
    path = tmp_path / "three.csv"
    path.write_text("a,time_ms\n1,3.0\n2,2.0\n3,1.0\n")
    space = ReplaySpace(path)
    sampler = SurrogateSampler(space=search_space_of(space), seed=seed)
    study = optuna.create_study(sampler=sampler)
    _tell(study, space, study.ask({"a": space.distributions["a"]}))
    told = study.trials[0].params["a"]
    waiting = next(a for a in (1, 2, 3) if a != told)
    study.enqueue_trial({"a": waiting})
    # A trial the storage started while the queued one waits (ask would take that one).
    number = study._storage.create_new_trial(study._study_id)
    trial = study._storage.get_trial(number)
    proposal = sampler.sample_relative(study, trial, dict(space.distributions))
    assert proposal == {"a": ({1, 2, 3} - {told, waiting}).pop()}


def test_alone_the_search_is_what_it_was(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    runs = [
        replay_search(
            space,
            SurrogateSampler(space=search_space_of(space), seed=3, spread=True, shared_batch=b),
            budget=40,
        )
        for b in (1, 8)
    ]
    assert runs[0].best_after == runs[1].best_after
    assert runs[0].best_config == runs[1].best_config


@pytest.mark.parametrize("batch", [1, 4])
def test_out_of_order_completions_extend_the_posterior(tmp_path: Path, batch: int) -> None:
    space = bowl_space(tmp_path / "s.csv")
    # Hyperparameters fitted once (the growth rule never asks again) and only GP steps: the
    # posterior is conditioned afresh once, then extended by each newly told evaluation.
    samplers = [
        SurrogateSampler(
            space=search_space_of(space),
            seed=i,
            n_startup=5,
            acquisitions=("gp-ei",),
            gp_refit_growth=100.0,
            shared_batch=batch,
        )
        for i in range(3)
    ]
    study = _workers(space, samplers, proposals=45)
    told = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    numbers = [t.number for t in sorted(told, key=lambda t: t.datetime_complete)]
    assert numbers != sorted(numbers)  # the completions were out of order
    for sampler in samplers:
        if sampler.gp_fits:
            assert len(sampler.gp_fits) == 1
            assert sampler.gp_conditioned_afresh == 1


def test_the_workers_of_a_study_share_their_fits(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    lone = SurrogateSampler(space=search_space_of(space), seed=0, spread=True)
    replay_search(space, lone, budget=60)
    for batch in (1, 4):
        samplers = [
            SurrogateSampler(space=search_space_of(space), seed=i, spread=True, shared_batch=batch)
            for i in range(4)
        ]
        study = _workers(space, samplers, proposals=60)
        assert study.best_value == pytest.approx(space.optimum_ms)
        # The GP's hyperparameters are fitted for the study as for one search (each worker
        # takes the ones fitted to the most evaluations): no more fits in all than alone.
        assert sum(len(s.gp_fits) for s in samplers) <= len(lone.gp_fits)
        queued = [t for t in study.trials if "fixed_params" in t.system_attrs]
        if batch == 1:
            assert not queued
        else:  # most proposals came from another worker's model step
            assert len(queued) >= len(study.trials) // 2


def _forest_only(space: ReplaySpace, seed: int) -> SurrogateSampler:
    return SurrogateSampler(space=search_space_of(space), seed=seed, acquisitions=("ei",))


def test_alone_the_forest_is_refitted_as_the_evaluations_grow(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    sampler = _forest_only(space, seed=0)
    replay_search(space, sampler, budget=60)
    # Below 100 evaluations the growth rule (n // 50) asks for a fit at every model step.
    assert sampler.forest_fits == list(range(10, 60))


def test_in_a_shared_study_a_forest_fit_serves_two_steps_of_a_worker(tmp_path: Path) -> None:
    """Eight workers: the study grows by about eight between two proposals of one, more than
    the growth rule's n // 50, so each step would refit; a fit serves two instead."""
    space = bowl_space(tmp_path / "s.csv")
    samplers = [_forest_only(space, seed=i) for i in range(8)]
    study = _workers(space, samplers, proposals=160)
    for sampler in samplers:
        steps = sampler._model_steps
        assert steps >= 8
        assert len(sampler.forest_fits) <= (steps + 1) // 2
        # A reused fit is at most one step old: no two steps in a row without a fit.
        assert len(sampler.forest_fits) >= steps // 2
    assert study.best_value == pytest.approx(space.optimum_ms)


def _gp_only(space: ReplaySpace) -> SurrogateSampler:
    return SurrogateSampler(
        space=search_space_of(space), seed=0, n_startup=5, acquisitions=("gp-ei",)
    )


def _fit_begun_elsewhere(study: optuna.Study, space: ReplaySpace, n: int) -> optuna.Trial:
    """Another worker's trial, running, whose proposal began a GP fit for ``n`` evaluations
    (its hyperparameters not published yet)."""
    trial = study.ask(space.distributions)
    study._storage.set_trial_system_attr(
        trial._trial_id, FITTING_ATTR, {"n": n, "names": ["a", "b", "c"]}
    )
    return trial


def test_a_gp_fit_another_worker_began_is_not_made_again(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    storage = optuna.storages.InMemoryStorage()
    random = optuna.create_study(
        storage=storage, study_name="shared", sampler=optuna.samplers.RandomSampler(seed=1)
    )
    for _ in range(20):
        _tell(random, space, random.ask(space.distributions))
    other = _fit_begun_elsewhere(random, space, 20)
    # A worker without hyperparameters gives its GP step to the forest.
    fresh = _gp_only(space)
    mine = optuna.load_study(study_name="shared", storage=storage, sampler=fresh)
    _tell(mine, space, mine.ask(space.distributions))
    assert fresh.gp_fits == [] and fresh.forest_fits == [20]
    # Once the study grew by a tenth past the fit begun, a fit is due again: this worker makes
    # it, and says so on its trial while the other worker is still running.
    for _ in range(2):
        _tell(random, space, random.ask(space.distributions))
    trial = mine.ask(space.distributions)
    assert fresh.gp_fits == [23]
    assert mine.trials[trial.number].system_attrs[FITTING_ATTR]["n"] == 23
    _tell(mine, space, trial)
    _tell(random, space, other)
    # A worker with hyperparameters keeps them while another's fit for this growth runs.
    for _ in range(2):
        _tell(random, space, random.ask(space.distributions))
    other = _fit_begun_elsewhere(random, space, 26)
    trial = mine.ask(space.distributions)
    assert fresh.gp_fits == [23] and fresh.forest_fits == [20]  # the GP's step, kept theta
    _tell(mine, space, trial)
    _tell(random, space, other)


def test_alone_a_gp_fit_says_nothing_to_the_study(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    sampler = _gp_only(space)
    study = optuna.create_study(sampler=sampler)
    for _ in range(30):
        _tell(study, space, study.ask(space.distributions))
    assert len(sampler.gp_fits) >= 5
    assert not any(FITTING_ATTR in t.system_attrs for t in study.trials)


def test_the_extension_order_keeps_the_known_first() -> None:
    a, b, c, d = (1,), (2,), (3,), (4,)
    assert extension_order([b, a], [a, b, c]) == [1, 0, 2]
    assert extension_order([a, a], [a, c, a, d]) == [0, 2, 1, 3]
    assert extension_order([], [c, d]) == [0, 1]
    assert extension_order([d], [a, b]) is None
    assert extension_order([a, a], [a, b]) is None
