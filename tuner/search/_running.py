"""Which tiling another worker of a shared study is measuring now: its running trials."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import optuna

from tilewise.settings import Settings

#: Seconds an older trial short of parameters is waited for without a new one written (see
#: running_before): a worker descheduled on a busy host, not one that died writing them.
STALL_S = 10.0

#: Longest pause between two reads of the study's running trials while an older one is waited
#: for (see running_before); the first pauses are shorter, as its parameters usually come in
#: milliseconds.
POLL_MAX_S = 0.2


def running_before(study: optuna.Study, trial: optuna.Trial, settings: Settings) -> bool:
    """Whether an older running trial of ``study`` has the parameters of ``trial``: another
    worker is measuring that tiling now.

    Only an older trial counts: two workers that ask for one tiling at once (both popped a copy
    of the queued default, or two samplers that saw the same finished trials) each see the
    other's trial running, and if both gave way the tiling would be measured by neither. An
    older trial is created before this one, but its parameters are written one by one after
    that: one still short of some, all those written so far this trial's, is waited for until
    it has them all, or both might measure. Its worker may be slowed down for seconds on a busy
    host, so the wait ends only when no parameter came for :data:`STALL_S` (its worker died
    writing them, or its ask failed). A trial started longer ago than one evaluation can take is
    left behind by a worker that was killed mid-trial: it is ignored, or its tiling would never
    be measured.
    """
    bound = timedelta(
        seconds=settings.build_timeout_s + 2 * settings.run_timeout_s + settings.max_measure_s
    )
    pause = 0.005
    written, progress_at = -1, time.monotonic()
    while True:
        stale = datetime.now() - bound  # Optuna stores naive local times
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
        if not older:
            return False
        now_written = sum(len(other.params) for other in older)
        if now_written != written:
            written, progress_at = now_written, time.monotonic()
        elif time.monotonic() - progress_at > STALL_S:
            return False
        time.sleep(pause)
        pause = min(2 * pause, POLL_MAX_S)
