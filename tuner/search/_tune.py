"""One tuning run of one workload: an Optuna study driven by ask-and-tell.

For every proposal of the strategy named in the Tuner (``tilewise.search._strategies``, told
which tilings pass the static check) the Tuner evaluates the tiling (``_evaluate``: the cheap
checks first, then build, run and measure) and tells the study its outcome (``_loop``);
Optuna sees failures as constraint violations (``trial.set_constraint``), so the sampler
learns to stay away from them. The best tilings of the nearest tuned shapes of the op (warm
start), the backend's prior tilings (``Backend.prior_tilings``) and the default tiling are
measured first, a tiling already measured for the workload is never measured again, and at the
end the best few and the default are re-measured side by side before the winner is stored
(``_remeasure``).

Several tuners (workers) may share one workload's study: each re-reads the records right before
it evaluates a tiling, and claims the tiling in the database first (``tw_tiling_claims``): a
proposal another tuner claimed is left to it, so no tiling is measured twice. That is
also how a job's holder and its assistants (idle workers that help with a running job) share
the job's budget; only the holder re-measures and stores the winner.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
import sqlalchemy.exc
from threadpoolctl import threadpool_limits

from tilewise import store
from tilewise.errors import StoreError
from tilewise.kernels.backends import Backend
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.search import _remeasure, _study
from tilewise.search._evaluate import Evaluator, JobTag, Outcome, Progress
from tilewise.search._loop import AskTellLoop, set_constraints
from tilewise.search._remeasure import Measured
from tilewise.search._space import SearchSpace, distributions, tiling_from_params
from tilewise.search._storage import close_storage, open_storage
from tilewise.search._strategies import make_sampler
from tilewise.search._warm import nearest_tuned_tilings
from tilewise.settings import Settings
from tilewise.status import RecordSource, RecordStatus
from tilewise.types import Shape, Tiling, Workload

log = logging.getLogger(__name__)

#: The backend's prior tilings measured first (on an NPU: the cost model's fastest three).
PRIOR_TILINGS = 3


#: What a study that cannot be read or written raises (its storage's errors).
_STUDY_ERRORS = (optuna.exceptions.OptunaError, sqlalchemy.exc.SQLAlchemyError)


@dataclass(frozen=True)
class Budget:
    evaluations: int
    seconds: float | None = None


@dataclass(frozen=True)
class TuneResult:
    workload: Workload
    best: Measured | None
    default: Measured | None
    progress: Progress
    seconds: float
    #: ``should_stop`` ended the search: nothing was re-measured or stored as the winner.
    stopped: bool = False
    #: Tilings of the workload evaluated by earlier runs (not evaluated again): > 0 when this
    #: run continued a study.
    earlier_evaluations: int = 0

    def why_no_best(self, time_limit: float | None, see: str) -> str:
        """Why the run found no tiling (``best`` is None), for a message: the time limit ran
        out before anything was evaluated, or the counts of what was, followed by ``see``
        (where the records' reasons are to be read)."""
        p = self.progress
        if p.evaluations == 0 and time_limit is not None:
            return f"the time limit of {time_limit:g} s ran out before the first evaluation"
        return (
            f"no tiling ran successfully in {p.evaluations} evaluations ({p.infeasible}"
            f" infeasible, {p.failed} failed){see}"
        )

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.default is None:
            return None
        return self.default.latency_us / self.best.latency_us

    def to_dict(self) -> dict[str, Any]:
        p = self.progress
        return {
            "workload": self.workload.to_dict(),
            "best": self.best.to_dict() if self.best else None,
            "default": self.default.to_dict() if self.default else None,
            "speedup": self.speedup,
            "evaluations": p.evaluations,
            "infeasible": p.infeasible,
            "rejected_before_compile": p.rejected_static,
            # Candidates the strategy screened out with the static check before proposing:
            # they cost no compile, no launch and no record either.
            "screened_out": p.screened_out,
            "screened": p.screened,
            "failed": p.failed,
            "seconds": round(self.seconds, 3),
            # The strategy's seconds per proposal (median wall, median CPU) and in all.
            "propose_s": _rounded(p.propose.summary()),
            "stopped": self.stopped,
            "earlier_evaluations": self.earlier_evaluations,
        }


def _rounded(times: dict[str, float | None]) -> dict[str, float | None]:
    return {k: None if v is None else round(v, 4) for k, v in times.items()}


class Tuner(Evaluator):
    """Tunes one workload. Not thread-safe: one per worker thread."""

    def __init__(
        self,
        *,
        spec: OpSpec,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        backend: Backend,
        db: store.Store,
        settings: Settings,
        job: JobTag | None = None,
        strategy: str = "default",
    ) -> None:
        self.strategy = strategy
        self.tunables = spec.tunables(shape, dtype, target)
        # Candidates the strategy screened with the static check before proposing any:
        # never compiled, never launched, never recorded.
        self.screened = self.screened_out = 0
        super().__init__(
            spec=spec,
            shape=shape,
            dtype=dtype,
            target=target,
            backend=backend,
            db=db,
            settings=settings,
            job=job,
        )

    # -- the study ---------------------------------------------------------------------------
    def run(
        self,
        budget: Budget,
        *,
        seed: int | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        finish: bool = True,
    ) -> TuneResult:
        """Search until the budget is spent (or the job's, see :class:`JobTag`), then re-measure
        the best and store the winner (:meth:`finish`).

        ``should_stop`` ends the search early: nothing is re-measured or stored
        (``stopped``). Without ``finish`` (a worker assisting a job: its holder finishes it)
        the search is all: ``best`` and ``default`` are None.

        Raises:
            StoreError: the database (the records' or the Optuna study's) cannot be reached.
        """
        # The host's cores belong to the kernels being timed. After each call, the BLAS of numpy
        # and scipy keeps its worker threads spinning for a while (OpenBLAS: about 0.1 s): in a
        # profile of one tune they took 7% of all samples, some of them while a kernel was
        # timed. The matrices here are tiny (one row per evaluation): one thread is enough.
        with threadpool_limits(limits=1):
            return self._run(budget, seed, on_progress, should_stop, finish)

    def _run(
        self,
        budget: Budget,
        seed: int | None,
        on_progress: Callable[[Progress], None] | None,
        should_stop: Callable[[], bool] | None,
        finish: bool,
    ) -> TuneResult:
        started = time.monotonic()
        progress = Progress(budget=budget.evaluations)
        earlier_runs = sum(1 for o in self.seen.values() if o.status != RecordStatus.INFEASIBLE)
        earlier = [o.latency_us for o in self.seen.values() if o.latency_us is not None]
        progress.best_us = min(earlier, default=None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            storage = self._storage()
            try:
                stopped = self._search(
                    storage, budget, progress, started, seed, on_progress, should_stop
                )
            finally:
                close_storage(storage)
        except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError) as exc:
            # The study's storage lost the database (a PostgreSQL restart, a locked SQLite file):
            # a StoreError like our own store's, so a worker hands its job back and resumes it
            # later instead of failing it for good over a transient outage.
            cause = exc if isinstance(exc, sqlalchemy.exc.OperationalError) else exc.__cause__
            if not isinstance(cause, sqlalchemy.exc.OperationalError):
                raise
            reason = str(cause.orig).strip() or type(cause.orig).__name__
            raise StoreError(
                f"cannot reach database {self.db.safe_url} (the Optuna study): {reason}"
            ) from exc
        progress.screened, progress.screened_out = self.screened, self.screened_out
        # A stop asked for during the last evaluation, after the loop's last look.
        stopped = stopped or (should_stop is not None and should_stop())
        if finish and not stopped:
            default = self.spec.default_tiling(self.shape, self.dtype, self.target)
            try:
                best, default_measured = self.finish(default, should_stop)
            except _remeasure.Stopped:
                stopped = True
        if stopped or not finish:
            return TuneResult(
                self.workload,
                None,
                None,
                progress,
                time.monotonic() - started,
                stopped=stopped,
                earlier_evaluations=earlier_runs,
            )
        if best is not None:
            self._record_outcome(best, default_measured)
        return TuneResult(
            self.workload,
            best,
            default_measured,
            progress,
            time.monotonic() - started,
            earlier_evaluations=earlier_runs,
        )

    def _record_outcome(self, best: Measured, default: Measured | None) -> None:
        attrs: dict[str, Any] = {"best_latency_us": best.latency_us}
        if default is not None:
            attrs["default_latency_us"] = default.latency_us
            attrs["speedup"] = default.latency_us / best.latency_us
        try:
            storage = self._storage()
        except (sqlalchemy.exc.SQLAlchemyError, StoreError) as exc:
            log.warning("%s: the Optuna study is out of reach: %s", self.workload.study_name, exc)
            return
        try:
            _study.record_outcome(storage, self.workload.study_name, attrs)
        finally:
            close_storage(storage)

    def _storage(self) -> optuna.storages.BaseStorage:
        """The storage of this workload's study (the database, or its journal file)."""
        return open_storage(self.db.url, self.workload.study_name, self.settings.study_journal_dir)

    def _search(
        self,
        storage: optuna.storages.BaseStorage,
        budget: Budget,
        progress: Progress,
        started: float,
        seed: int | None,
        on_progress: Callable[[Progress], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> bool:
        """Run the trials; True if ``should_stop`` ended them."""
        study = optuna.create_study(
            study_name=self.workload.study_name,
            storage=storage,
            sampler=make_sampler(seed, strategy=self.strategy, space=self._search_space()),
            direction="minimize",
            load_if_exists=True,
        )
        _study.describe(study, self.workload, strategy=self.strategy)
        _study.end_orphans(study, self.orphaned)
        default = self.spec.default_tiling(self.shape, self.dtype, self.target)
        if default.key() not in self.seen:
            # First, so that even a budget the warm start would fill measures the default the
            # winner is compared with. skip_if_exists: another worker on this study may have
            # queued it already.
            study.enqueue_trial(dict(default), skip_if_exists=True)
        for tiling in self._warm_start():
            study.enqueue_trial(dict(tiling), skip_if_exists=True)
        loop = _TunerLoop(
            self,
            study,
            budget=budget,
            progress=progress,
            started=started,
            default=default,
            on_progress=on_progress,
            should_stop=should_stop,
        )
        loop.run()
        return loop.stopped

    def _search_space(self) -> SearchSpace:
        """The tunables, and the static check as the sampler's feasibility test."""

        def feasible(params: Mapping[str, object]) -> bool:
            tiling = tiling_from_params(dict(params))
            ok = self.spec.valid(tiling, self.shape, self.dtype, self.target)
            self.screened += 1
            self.screened_out += not ok
            return ok

        return SearchSpace(distributions(self.tunables), feasible=feasible)

    def _warm_start(self) -> list[Tiling]:
        """The best tilings of the nearest tuned shapes that pass the check here, then the
        backend's priors (``Backend.prior_tilings``), those not measured yet."""
        with self.db.session() as s:
            tilings = nearest_tuned_tilings(
                s, spec=self.spec, shape=self.shape, dtype=self.dtype, target=self.target
            )
        priors = self.backend.prior_tilings(
            self.spec, self.shape, self.dtype, self.target, limit=PRIOR_TILINGS
        )
        tilings += [t for t in priors if t not in tilings]
        # A neighbour's winner can pass the check here with a value outside this shape's
        # domains (a core split of another M): Optuna cannot enqueue such a tiling.
        domains = {t.name: set(t.values) for t in self.tunables}
        return [
            t
            for t in tilings
            if t.key() not in self.seen
            and set(t) == set(domains)
            and all(t[name] in values for name, values in domains.items())
        ]

    def measure_default(self, default: Tiling, *, again: bool = False) -> Outcome:
        """``default`` evaluated at the finish as a trial of the study, so that the study knows
        its time and its record its trial (assistants may have spent the job's budget without
        it). Another worker that claimed it (an assistant's evaluation in flight) measures it:
        its record is awaited. Evaluated outside the study when the study is out of reach."""
        if not self.claim(default):
            return self.awaited(default) or super().measure_default(default, again=again)
        try:
            storage = self._storage()
        except (sqlalchemy.exc.SQLAlchemyError, StoreError) as exc:
            log.warning("%s: the Optuna study is out of reach: %s", self.workload.study_name, exc)
            return super().measure_default(default, again=again)
        try:
            trial = self._running_trial(storage, default)
            if trial is None:
                return super().measure_default(default, again=again)
            try:
                outcome = self.evaluate(
                    default,
                    source=RecordSource.DEFAULT,
                    again=again,
                    progress=Progress(budget=1),
                    trial=trial.number,
                )
            except BaseException:
                # The evaluation's error is the one to see.
                with contextlib.suppress(Exception):
                    trial.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                with contextlib.suppress(Exception):
                    self.release(default)
                raise
            set_constraints(trial, outcome.constraints)
            trial.study.tell(trial, outcome.value if outcome.value is not None else math.inf)
            return outcome
        finally:
            close_storage(storage)

    def _running_trial(
        self, storage: optuna.storages.BaseStorage, tiling: Tiling
    ) -> optuna.Trial | None:
        """A new running trial of ``tiling`` in the workload's study; None without a study (a
        finish without a search) or when the study cannot be written."""
        name = self.workload.study_name
        try:
            study = optuna.load_study(study_name=name, storage=storage)
            template = optuna.trial.create_trial(
                state=optuna.trial.TrialState.RUNNING,
                params=dict(tiling),
                distributions=distributions(self.tunables),
            )
            study_id = storage.get_study_id_from_name(name)
            return optuna.Trial(study, storage.create_new_trial(study_id, template_trial=template))
        except KeyError:  # no such study
            return None
        except _STUDY_ERRORS as exc:
            log.warning("%s: the default is measured outside the study: %s", name, exc)
            return None

    def finish(
        self, default: Tiling, should_stop: Callable[[], bool] | None = None
    ) -> tuple[Measured | None, Measured | None]:
        """Re-measure the best few and the default side by side; store the winner (see
        :func:`tilewise.search._remeasure.finish`, which raises its ``Stopped`` when
        ``should_stop`` says so)."""
        return _remeasure.finish(self, default, should_stop)


class _TunerLoop(AskTellLoop[str, Outcome]):
    """The Tuner's ask-and-tell loop: tilings evaluated on its backend, until the budget (its
    evaluations, its seconds, the job's evaluations) is spent or ``should_stop`` says so."""

    def __init__(
        self,
        tuner: Tuner,
        study: optuna.Study,
        *,
        budget: Budget,
        progress: Progress,
        started: float,
        default: Tiling,
        on_progress: Callable[[Progress], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        super().__init__(
            study,
            distributions(tuner.tunables),
            budget=budget.evaluations,
            seen=tuner.seen,
            counts=progress,
        )
        self.tuner, self.progress, self.default = tuner, progress, default
        self.seconds, self.started = budget.seconds, started
        self.on_progress, self.should_stop = on_progress, should_stop
        #: ``should_stop`` ended the loop.
        self.stopped = False

    def key(self, params: Mapping[str, Any]) -> str:
        return tiling_from_params(dict(params)).key()

    def spent(self) -> int:
        return self.progress.evaluations

    def should_end(self) -> bool:
        """Checked before every proposal. While the job's evaluations in flight would spend its
        budget, waits for their records rather than propose one that would not count (one that
        ends rejected before a build gives its evaluation back)."""
        pause = 0.05
        while True:
            if self.seconds is not None and time.monotonic() - self.started > self.seconds:
                return True
            spent, full = self._job_budget()
            if spent:
                return True
            if self.should_stop is not None and self.should_stop():
                self.stopped = True
                return True
            if self.tuner.all_variants_rejected():
                log.warning("every compile-time variant is rejected after its build: stopping")
                return True
            if not full:
                return False
            time.sleep(pause)
            pause = min(2 * pause, self.tuner.settings.poll_s)

    def running_elsewhere(self, trial: optuna.Trial) -> bool:
        """Whether another worker sharing the study claimed this tiling first
        (:meth:`~tilewise.search._evaluate.Evaluator.claim`): its record will tell, and the
        finish awaits it rather than measure it again."""
        return not self.tuner.claim(tiling_from_params(trial.params))

    def _job_budget(self) -> tuple[bool, bool]:
        """Whether the job's evaluations (this tuner's and its other workers') reached its
        budget, and whether they do with those in flight (claimed tilings not recorded yet)."""
        job = self.tuner.job
        if job is None or job.budget_evals is None:
            return False, False
        live = self.tuner.live_since()
        with self.tuner.db.session() as s:
            spent = store.job_spent(s, job_id=job.job_id)
            if spent >= job.budget_evals:
                return True, True
            flying = store.claims_in_flight(s, workload_id=self.tuner.workload_id, **live)
        return False, spent + flying >= job.budget_evals

    def evaluate(self, trial: optuna.Trial) -> Outcome:
        tiling = tiling_from_params(trial.params)
        source = RecordSource.DEFAULT if tiling == self.default else RecordSource.SEARCH
        try:
            return self.tuner.evaluate(
                tiling, source=source, progress=self.progress, trial=trial.number
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the evaluation's error is the one to see
                self.tuner.release(tiling)
            raise

    def told(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)
