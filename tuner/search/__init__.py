"""Search: Optuna studies over an op's tunables, with cheap rejections before any compile."""

from tilewise.search._evaluate import JobTag, Progress
from tilewise.search._measure import Attempt, Measurer, cell_measurer
from tilewise.search._remeasure import Measured
from tilewise.search._replay import ReplayResult, ReplayRun, ReplaySpace, replay_search
from tilewise.search._space import SearchSpace
from tilewise.search._strategies import STRATEGIES, make_sampler
from tilewise.search._surrogate import SurrogateSampler
from tilewise.search._tune import Budget, Tuner, TuneResult

__all__ = [
    "STRATEGIES",
    "Attempt",
    "Budget",
    "JobTag",
    "Measured",
    "Measurer",
    "Progress",
    "ReplayResult",
    "ReplayRun",
    "ReplaySpace",
    "SearchSpace",
    "SurrogateSampler",
    "TuneResult",
    "Tuner",
    "cell_measurer",
    "make_sampler",
    "replay_search",
]
