"""What the default strategy reads of its study and leaves on it for the study's other workers
(a job's holder and its assistants, each with its own sampler): every configuration proposed,
the evaluations, how many other trials run, and the GP hyperparameter fits, kept as trial
system attributes."""

from __future__ import annotations

from typing import Any, NamedTuple

from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tilewise.search._features import Config

#: The trial system attribute that holds the GP hyperparameters fitted when it was proposed.
THETA_ATTR = "tilewise:gp_theta"
#: ... and the one that says a fit for that many evaluations began (in a shared study).
FITTING_ATTR = "tilewise:gp_fitting"


class History(NamedTuple):
    """What a proposal knows of its study (:func:`read_history`)."""

    seen: set[Config]  # every configuration proposed so far, queued ones included
    observed: list[tuple[Config, float]]  # the evaluated ones with their values
    running: int  # other trials running: the study's other workers
    shared: tuple[int, list[float]] | None  # the GP fit to the most evaluations: (n, theta)
    fitting: int  # the most evaluations a GP fit began for in the study (0: none)


def read_history(study: Study, trial: FrozenTrial, names: tuple[str, ...]) -> History:
    """The study's trials other than ``trial``, as configurations of the fields ``names``."""
    seen: set[Config] = set()
    observed: list[tuple[Config, float]] = []
    running = fitting = 0
    shared: tuple[int, list[float]] | None = None
    fields = list(names)
    for t in study.get_trials(deepcopy=False):
        if t.number == trial.number:
            continue
        fitted = t.system_attrs.get(THETA_ATTR)
        if fitted and (shared is None or fitted["n"] > shared[0]) and fitted["names"] == fields:
            shared = (fitted["n"], fitted["theta"])
        begun = t.system_attrs.get(FITTING_ATTR)
        if begun and begun["names"] == fields:
            fitting = max(fitting, begun["n"])
        params = t.params
        if t.state == TrialState.WAITING:  # queued: its parameters are still to be set
            params = t.system_attrs.get("fixed_params") or {}
        elif t.state == TrialState.RUNNING:
            running += 1
        if not all(n in params for n in names):
            continue
        config = tuple(params[n] for n in names)
        seen.add(config)
        if t.state == TrialState.COMPLETE and t.value is not None:
            observed.append((config, float(t.value)))
    return History(seen, observed, running, shared, fitting)


def publish(study: Study, trial_id: int, attr: str, names: tuple[str, ...], **value: Any) -> None:
    """Keep ``value`` (for the fields ``names``) on the trial ``trial_id``, where the study's
    other workers read it (:func:`read_history`)."""
    study._storage.set_trial_system_attr(trial_id, attr, {**value, "names": list(names)})
