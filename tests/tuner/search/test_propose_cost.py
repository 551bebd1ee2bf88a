"""What proposing costs: the sampler's seconds per proposal in reports, and the default
strategy's work per proposal bounded however many evaluations the study holds."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.tuner.search.bowl import bowl_space
from tilewise.search import ReplaySpace, replay_search
from tilewise.search._bench import run_strategies, search_space_of, summarize
from tilewise.search._space import SearchSpace
from tilewise.search._surrogate import SurrogateSampler
from tilewise.search._timing import TimedSampler


def test_the_report_gives_the_seconds_per_proposal(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    results = run_strategies(space, strategies=["random", "default"], budget=15, seeds=2)
    for result in results:
        for run in result.runs:
            # One figure per proposal, each the sampler's own time.
            assert len(run.propose.wall) == run.proposals == len(run.propose.cpu)
            assert all(w >= 0 for w in run.propose.wall)
    report = summarize(space, results, budget=15)
    for name in ("random", "default"):
        times = report["strategies"][name]["propose_s"]
        assert set(times) == {"median_s", "cpu_median_s", "late_s", "total_s"}
        assert times["median_s"] is not None and 0 <= times["median_s"] <= times["total_s"]
    # The model's proposals cost more than uniform draws: the figure measures the strategy.
    default, random = (report["strategies"][n]["propose_s"] for n in ("default", "random"))
    assert default["total_s"] > random["total_s"]


def test_the_timed_sampler_leaves_the_search_unchanged(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    runs = []
    for wrap in (False, True):
        sampler: optuna.samplers.BaseSampler = optuna.samplers.TPESampler(seed=4)
        if wrap:
            sampler = TimedSampler(sampler)
        runs.append(replay_search(space, sampler, budget=20).best_after)
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_the_default_strategys_work_per_proposal_is_bounded(tmp_path: Path) -> None:
    """Structural, not timed: the hyperparameter fits see at most ``gp_fit_max``
    evaluations, the GP over a listed pool is conditioned afresh only when its hyperparameters
    change (otherwise extended by the new evaluations), and past ``gp_max_entries`` the
    forest takes the GP's turns."""
    space = bowl_space(tmp_path / "s.csv")
    sampler = SurrogateSampler(
        space=search_space_of(space), seed=0, gp_fit_max=30, gp_max_entries=90 * space.configs
    )
    replay_search(space, sampler, budget=120)
    assert sampler.gp_fits and max(sampler.gp_fits) == 30
    assert sampler.gp_conditioned_afresh == len(sampler.gp_fits)
    # Refits at growth of 10% from 10 evaluations, until 90: far fewer than the GP's turns.
    assert len(sampler.gp_fits) <= math.ceil(math.log(90 / 10) / math.log(1.1)) + 1
    # No GP turn past 90 evaluations: the last fit was at most at 90.
    assert sampler._gp_theta_n <= 90


def test_a_drawn_pool_stays_its_size(tmp_path: Path) -> None:
    """A space too large to list: the random candidates are the newest ``pool_size`` draws,
    not every draw of the search."""
    space = bowl_space(tmp_path / "s.csv")
    known = search_space_of(space)
    unlisted = SearchSpace(known.distributions, feasible=known.feasible)
    sampler = SurrogateSampler(space=unlisted, seed=1, pool_size=64, enumerate_limit=10)
    replay_search(space, sampler, budget=40)
    assert sampler.pool.drawn is not None and len(sampler.pool.drawn) <= 64


def test_a_drawn_pool_fills_an_eighth_per_proposal(tmp_path: Path) -> None:
    """The first proposal screens no more than a later one (an eighth of ``pool_size``, at
    four draws per feasible one), and the pool grows to its size over the start-up draws: a
    worker joining a shared study does not screen a whole pool before its first launch."""
    space = bowl_space(tmp_path / "s.csv")
    known = search_space_of(space)
    check = known.feasible
    assert check is not None
    screened = [0]

    def feasible(params: Mapping[str, Any]) -> bool:
        screened[0] += 1
        return check(params)

    unlisted = SearchSpace(known.distributions, feasible=feasible)
    sampler = SurrogateSampler(space=unlisted, seed=3, pool_size=64, enumerate_limit=10)
    study = optuna.create_study(sampler=sampler)
    sizes, per_ask = [], []
    for _ in range(8):
        screened[0] = 0
        trial = study.ask(dict(known.distributions))
        per_ask.append(screened[0])
        study.tell(trial, 1.0 + trial.number)
        assert sampler.pool.drawn is not None
        sizes.append(len(sampler.pool.drawn))
    assert 0 < per_ask[0] <= 4 * 64 // 8
    assert max(per_ask) <= 4 * 64 // 8
    assert sizes == sorted(sizes) and sizes[0] <= 64 // 8 < sizes[-1] <= 64


def test_stopping_at_the_optimum_changes_no_figure(tmp_path: Path) -> None:
    space = bowl_space(tmp_path / "s.csv")
    results = {
        stop: run_strategies(space, strategies=["tpe"], budget=60, seeds=3, stop_at_optimum=stop)
        for stop in (False, True)
    }
    full, stopped = (
        summarize(space, results[stop], budget=60)["strategies"]["tpe"] for stop in (False, True)
    )
    for key in ("evals_to_5pct", "evals_to_1pct", "ratio_at"):
        assert full[key] == stopped[key]
    # The runs that found the optimum ended there.
    lengths = {stop: [len(r.best_after) for r in results[stop][0].runs] for stop in results}
    assert sum(lengths[True]) < sum(lengths[False]) == 3 * 60


def test_the_default_start_spreads_every_fields_values(tmp_path: Path) -> None:
    """Five start-up draws on a 12 x 12 x 3 space: five values of each 12-valued field, and
    every value of the 3-valued one (uniform draws repeat values by chance)."""
    space = bowl_space(tmp_path / "s.csv")
    for seed in range(3):
        sampler = SurrogateSampler(
            space=search_space_of(space), seed=seed, n_startup=5, spread=True
        )
        study = optuna.create_study(sampler=sampler)
        for _ in range(5):
            trial = study.ask(space.distributions)
            study.tell(trial, space.evaluate(trial.params).time_ms)
        for name, distinct in (("a", 5), ("b", 5), ("c", 3)):
            assert len({t.params[name] for t in study.trials}) == distinct, (seed, name)


def test_a_recorded_space_past_the_listing_limit_is_drawn_from_its_rows(tmp_path: Path) -> None:
    """A recorded space of more configurations than ``enumerate_limit`` is not scored whole at
    every step: the pool is drawn from its rows (none of them outside the space), as for a
    space too large to list, and the search still works."""
    lines = ["a,b,c,time_ms"]
    for a, b, c in itertools.product(range(1, 13), range(1, 13), (1, 2, 4)):
        if (a + b) % 2 == 0:  # half the product: a uniform draw of the product is often no row
            lines.append(f"{a},{b},{c},{1.0 + (a - 7) ** 2 + 0.5 * (b - 3) ** 2 + 0.1 * c}")
    (tmp_path / "half.csv").write_text("\n".join(lines) + "\n")
    space = ReplaySpace(tmp_path / "half.csv")
    rows = {tuple(c.values()) for c in space.candidates()}
    listed = SurrogateSampler(space=search_space_of(space), seed=2, enumerate_limit=len(rows))
    replay_search(space, listed, budget=12)
    assert listed.pool.listed is not None and len(listed.pool.listed) == len(rows)

    space = ReplaySpace(tmp_path / "half.csv")
    drawn = SurrogateSampler(
        space=search_space_of(space), seed=2, pool_size=64, enumerate_limit=len(rows) - 1
    )
    run = replay_search(space, drawn, budget=60)
    assert drawn.pool.listed is None
    assert drawn.pool.drawn and set(drawn.pool.drawn) <= rows
    assert space.infeasible == 0 and space.evaluations == len(run.best_after) <= 60
    assert run.best_ms is not None and run.best_ms <= 1.05 * space.optimum_ms
