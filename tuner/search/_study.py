"""What an Optuna study of tilewise says about itself, for optuna-dashboard and other readers.

A study is named by its workload's key; the attributes make it readable without that key: the
op, its version, the shape, dtype, target and strategy when the study is opened, the re-measured
default and best latencies once a tune finishes. The objective is named ``latency_us``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
import sqlalchemy.exc

from tilewise.errors import StoreError
from tilewise.types import Workload

log = logging.getLogger(__name__)

OBJECTIVE = "latency_us"


def describe(study: optuna.Study, workload: Workload, *, strategy: str) -> None:
    """Name the objective and set the workload's attributes (once per study)."""
    attrs: dict[str, Any] = {
        "op": workload.op,
        "op_version": workload.op_version,
        "shape": dict(workload.shape),
        "dtype": workload.dtype,
        "target": workload.target,
        "strategy": strategy,
    }
    known = study.user_attrs
    for key, value in attrs.items():
        if known.get(key) != value:
            study.set_user_attr(key, value)
    if study.metric_names != [OBJECTIVE]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([OBJECTIVE])


def record_outcome(
    storage: optuna.storages.BaseStorage, name: str, attrs: Mapping[str, Any]
) -> None:
    """Add the finished tune's figures to the study; a failure is logged, never raised: the
    winner is already stored, and the attributes only describe it."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        for key, value in attrs.items():
            study.set_user_attr(key, value)
    except (
        KeyError,
        optuna.exceptions.StorageInternalError,
        sqlalchemy.exc.SQLAlchemyError,
        StoreError,  # a study journal's file out of reach (tilewise.search._storage)
    ) as exc:
        log.warning("%s: could not add the tune's figures to the Optuna study: %s", name, exc)


def end_orphans(study: optuna.Study, orphaned: set[str]) -> None:
    """Fail the study's running trials of the tilings ``orphaned`` (by key): a tune of this host
    left them running when it died mid-evaluation (its claims name them). Counted in flight,
    they would change every later proposal, and the default queued first would not be queued
    again: a queued one is queued anew."""
    from tilewise.search._space import tiling_from_params

    if not orphaned:
        return
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if tiling_from_params(trial.params).key() in orphaned:
            fixed = trial.system_attrs.get("fixed_params")
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            if fixed:
                study.enqueue_trial(fixed)
            log.info("%s: trial %d ended: the tune running it died", study.study_name, trial.number)
