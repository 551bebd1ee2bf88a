"""Which tiling another worker of a shared study is measuring now: its running trials."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import optuna

from tilewise.settings import Settings

#: Seconds an older running trial whose parameters are not all written yet is waited for
#: (see running_before).
PARAMS_WAIT_S = 1.0


def running_before(study: optuna.Study, trial: optuna.Trial, settings: Settings) -> bool:
    """Whether an older running trial of ``study`` has the parameters of ``trial``: another
    worker is measuring that tiling now.

    Only an older trial counts: two workers that ask for one tiling at once (both popped a copy
    of the queued default, or two samplers that saw the same finished trials) each see the
    other's trial running, and if both gave way the tiling would be measured by neither. An
    older trial is created before this one, but its parameters are written one by one after
    that: one still short of some (its worker descheduled between the writes) is waited for,
    up to :data:`PARAMS_WAIT_S`, or both would measure. A trial started longer ago than one
    evaluation can take is left behind by a worker that was killed mid-trial: it is ignored
    too, or its tiling would never be measured.
    """
    stale = datetime.now() - timedelta(  # Optuna stores naive local times
        seconds=settings.build_timeout_s + 2 * settings.run_timeout_s + settings.max_measure_s
    )
    deadline = time.monotonic() + PARAMS_WAIT_S
    while True:
        older = [
            other
            for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if other.number < trial.number
            and other.datetime_start is not None
            and other.datetime_start > stale
            # Every parameter written so far is this trial's: the same tiling, or not known yet.
            and all(trial.params.get(name) == value for name, value in other.params.items())
        ]
        if any(len(other.params) == len(trial.params) for other in older):
            return True
        if not older or time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
