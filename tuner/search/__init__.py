"""Search: Optuna studies over an op's tunables, with cheap rejections before any compile."""

from tuner.search._tune import Budget, Measured, Progress, Tuner, TuneResult, make_sampler

__all__ = ["Budget", "Measured", "Progress", "TuneResult", "Tuner", "make_sampler"]
