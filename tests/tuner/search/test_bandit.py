"""The bandit that picks the surrogate's acquisition step by step (``_bandit``)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tilewise.search import ReplaySpace, replay_search
from tilewise.search._bandit import AcquisitionBandit, landed_in_top
from tilewise.search._bench import search_space_of
from tilewise.search._surrogate import SurrogateSampler


def _space(path: Path) -> ReplaySpace:
    """Restricted (a * b <= 64), failures in one corner, one smooth basin."""
    lines = ["a,b,c,time_ms"]
    for a, b, c in itertools.product((1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16), (0, 1, 2)):
        if a * b > 64:
            continue
        t = math.inf if a == 32 and b >= 2 else 1 + (math.log2(a) - 3) ** 2 + (b - 4) ** 2 / 8
        lines.append(f"{a},{b},{c},{t + 0.1 * c}")
    path.write_text("\n".join(lines) + "\n")
    return ReplaySpace(path)


def test_landed_in_top_counts_the_earlier_evaluations_at_least_as_fast() -> None:
    earlier = [5.0, 3.0, math.inf, 4.0, 1.0]
    assert landed_in_top(0.5, earlier, 1)  # a new best
    assert not landed_in_top(1.0, earlier, 1)  # a tie is no improvement
    assert landed_in_top(3.5, earlier, 3) and not landed_in_top(4.5, earlier, 3)
    assert not landed_in_top(math.inf, earlier, 5)  # a failure never succeeds
    assert landed_in_top(9.0, [], 1)  # the first finite evaluation is the best


def test_every_arm_is_tried_once_in_order_before_any_sampling() -> None:
    bandit = AcquisitionBandit(("gp-ei", "ei", "local"), np.random.default_rng(0))
    first = []
    for _ in range(3):
        arm = bandit.choose()
        first.append(arm)
        bandit.update(arm, False)
    assert first == ["gp-ei", "ei", "local"]


def test_the_arm_that_keeps_succeeding_takes_most_turns_until_it_stops() -> None:
    bandit = AcquisitionBandit(("a", "b", "c"), np.random.default_rng(3), discount=0.9)
    turns: Counter[str] = Counter()
    for _ in range(60):  # only "b" succeeds
        arm = bandit.choose()
        turns[arm] += 1
        bandit.update(arm, arm == "b")
    assert turns["b"] > 40, turns
    # Then only "c" succeeds: the discount forgets b's record and c takes over.
    late: Counter[str] = Counter()
    for step in range(120):
        arm = bandit.choose()
        if step >= 60:
            late[arm] += 1
        bandit.update(arm, arm == "c")
    assert late["c"] > 40, late


def test_settle_scores_each_proposal_once_against_the_evaluations_before_it() -> None:
    bandit = AcquisitionBandit(("a", "b"), np.random.default_rng(0), top=1, discount=1.0)
    bandit.proposed((1,), "a")
    bandit.proposed((2,), "b")
    observed = [((0,), 2.0), ((1,), 1.0), ((2,), 1.5)]  # a improved on the best, b did not
    bandit.settle(observed)
    bandit.settle(observed)  # nothing pending is left to score
    assert bandit.successes.tolist() == [1.0, 0.0]
    assert bandit.failures.tolist() == [0.0, 1.0]


def test_bad_settings_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least one arm"):
        AcquisitionBandit((), rng)
    with pytest.raises(ValueError, match="top must be"):
        AcquisitionBandit(("ei",), rng, top=0)
    with pytest.raises(ValueError, match="discount must be"):
        AcquisitionBandit(("ei",), rng, discount=0.0)


def test_a_bandit_sampler_proposes_feasible_unseen_configurations_with_every_arm(
    tmp_path: Path,
) -> None:
    space = _space(tmp_path / "s.csv")
    runs = []
    for _ in range(2):
        sampler = SurrogateSampler(space=search_space_of(space), seed=4, spread=True, bandit_top=5)
        runs.append(replay_search(space, sampler, budget=40))
        assert space.infeasible == 0 and runs[-1].duplicates == 0
        assert sampler.bandit is not None
        # 30 model steps, each scored but the last (not evaluated when the search ends).
        assert sampler.bandit.pulls.sum() == 30 and all(sampler.bandit.pulls > 0)
    assert runs[0].best_after == runs[1].best_after  # deterministic for a seed
