"""One tuning run of one workload: an Optuna study driven by ask-and-tell.

For every proposal the cheap checks run first, so a tiling that cannot work costs neither a
compile nor a launch:

1. static check — footprint per memory against the target, the op's validity rules;
2. build — the compile-time part only (cached); spills in loops and the stack frame;
3. run — the first launch is checked against the numpy reference;
4. measure — warm-up, repeats, median and spread.

Every outcome is appended to the records; Optuna sees failures as constraint violations
(``trial.set_constraint``), so the sampler learns to stay away from them. The sampler is the
strategy named in the Tuner (``tilewise.search._strategies``), told which tilings pass the static
check. The best tilings of the nearest tuned shapes of the op (warm start) and the default tiling
are measured first, a tiling already measured for the workload is never measured again, and at the
end the best few and the default are re-measured side by side, in rounds that visit each in
turn, before the winner is stored.

Several tuners (workers) may share one workload's study: each re-reads the records right before
it evaluates a tiling, and skips a proposal that another tuner is evaluating at that moment (a
running trial of the study with the same parameters), so no tiling is measured twice. That is
also how a job's holder and its assistants (idle workers that help with a running job) share
the job's budget; only the holder re-measures and stores the winner.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import optuna
import sqlalchemy.exc
from threadpoolctl import threadpool_limits

from tilewise import store
from tilewise.errors import StoreError
from tilewise.kernels.backends import Backend, BuildLimits, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import Check, OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.search._space import SearchSpace, distributions, tiling_from_params
from tilewise.search._strategies import make_sampler, set_constraints
from tilewise.search._warm import nearest_tuned_tilings
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling, Workload

log = logging.getLogger(__name__)

#: Value told to Optuna for a trial that produced no time; its constraints mark it infeasible.
NO_TIME = math.inf
#: The final re-measure visits every contender this many times, in turn (see finish).
REMEASURE_ROUNDS = 3
#: Seconds of launches, discarded, before the final re-measure's first round (see there).
REMEASURE_WARM_S = 0.3
#: The fastest contender replaces the default tiling only when a one-sided Mann-Whitney test
#: says its re-measured times are smaller at this level (see beats_default).
BEATS_DEFAULT_P = 0.05
#: The backend's prior tilings measured first (on an NPU: the cost model's fastest three).
PRIOR_TILINGS = 3


@dataclass(frozen=True)
class Budget:
    evaluations: int
    seconds: float | None = None


@dataclass(frozen=True)
class JobTag:
    """The job a worker's tuner works for: its records carry ``job_id`` while ``worker_id``
    holds or assists the running job and, for evaluations, the job's budget is not spent
    (:func:`tilewise.store.may_tag_record`), so the job's evaluations are counted exactly from
    the records.

    With ``budget_evals`` the search also ends as soon as the job has spent that many
    evaluations, whoever spent them (its holder or its assistants).
    """

    job_id: int
    worker_id: str
    budget_evals: int | None = None


@dataclass
class Progress:
    """Counters of a run, handed to the progress callback after every proposal."""

    budget: int
    evaluations: int = 0  # tilings built and launched (or whose build failed)
    rejected_static: int = 0  # rejected before compiling
    rejected_build: int = 0  # rejected after the build: spills, stack
    failed: int = 0  # build_failed, wrong, crashed, timeout
    duplicates: int = 0
    best_us: float | None = None
    best: Tiling | None = None
    screened: int = 0  # candidates the strategy checked statically before proposing
    screened_out: int = 0  # ... and rejected there

    @property
    def infeasible(self) -> int:
        return self.rejected_static + self.rejected_build


@dataclass(frozen=True)
class Outcome:
    status: str
    latency_us: float | None
    constraints: dict[str, float] = field(default_factory=dict)
    record_id: int | None = None


@dataclass(frozen=True)
class Measured:
    tiling: Tiling
    latency_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"tiling": dict(self.tiling), "latency_us": self.latency_us}


@dataclass(frozen=True)
class TuneResult:
    workload: Workload
    best: Measured | None
    default: Measured | None
    progress: Progress
    seconds: float
    #: ``should_stop`` ended the search: nothing was re-measured or stored as the winner.
    stopped: bool = False

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
            "stopped": self.stopped,
        }


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    # Workers starting together on a new database race to create Optuna's tables: the loser's
    # CREATE fails, and a second try finds the tables there.
    attempts = 5
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=store.optuna_engine_kwargs(url))
        except sqlalchemy.exc.SQLAlchemyError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


class Tuner:
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
        self.spec, self.shape, self.dtype, self.target = spec, shape, dtype, target
        self.backend, self.db, self.settings, self.job = backend, db, settings, job
        self.strategy = strategy
        self.workload = Workload(spec.name, spec.version, target.name, dtype, shape)
        self.tunables = spec.tunables(shape, dtype, target)
        self.measure = MeasureOptions(
            settings.warmup, settings.repeats, settings.max_measure_s, settings.warmup_s
        )
        self.limits = BuildLimits(settings.max_loop_spills, settings.max_stack_bytes)
        self.env = {**backend.environment(), "target": target.name}
        self._builds: dict[str, BuildResult] = {}
        # Candidates the strategy screened with the static check before proposing any:
        # never compiled, never launched, never recorded.
        self.screened = self.screened_out = 0
        with db.session() as s:
            self.workload_id = store.commit_workload(s, self.workload).id
            self._seen: dict[str, Outcome] = {
                r.tiling_key: _outcome_of(r)
                for r in store.records_for(s, workload_id=self.workload_id)
                if r.source != "remeasure"
            }

    # -- one tiling --------------------------------------------------------------------------
    def _record(self, tiling: Tiling, outcome: Outcome, **fields: Any) -> Outcome:
        with self.db.session() as s:
            # A job that is not held any more (reclaimed, cancelled) keeps no record of this
            # worker's: the record still serves the study, it is not one of the job's
            # evaluations.
            # Neither is a record of an assistant that stopped assisting, nor an evaluation
            # beyond the job's budget (another worker of the job spent it meanwhile).
            counts = (
                outcome.status != store.RecordStatus.INFEASIBLE
                and fields.get("source") != store.SOURCE_REMEASURE
            )
            job_id = None
            if self.job is not None and store.may_tag_record(
                s, job_id=self.job.job_id, worker_id=self.job.worker_id, counts=counts
            ):
                job_id = self.job.job_id
            row = store.add_record(
                s,
                workload_id=self.workload_id,
                tiling=tiling,
                status=outcome.status,
                latency_us=outcome.latency_us,
                constraints=outcome.constraints or None,
                env=self.env,
                job_id=job_id,
                **fields,
            )
        return Outcome(outcome.status, outcome.latency_us, outcome.constraints, row.id)

    def _build(self, tiling: Tiling) -> BuildResult:
        defines = self.spec.compile_key(tiling, self.dtype)
        key = repr(sorted(defines.items()))
        if key not in self._builds:
            self._builds[key] = self.backend.build(self.spec, defines)
        return self._builds[key]

    def _all_variants_rejected(self) -> bool:
        variants = 1
        for tunable in self.spec.compile_tunables:
            variants *= len(tunable.values)
        rejected = [
            b
            for b in self._builds.values()
            if not b.ok or any(v > 0 for v in b.violations(self.limits).values())
        ]
        return len(rejected) >= variants

    def static_check(self, tiling: Tiling) -> Check:
        """The op's checks, refined by the backend (``Backend.refine_check``: on Ascend targets
        with ``ub_check=compiler``, bishengir-compile's UB verdict on the kernel's buffer plan
        instead of the analytic footprint)."""
        check = self.spec.check(tiling, self.shape, self.dtype, self.target)
        return self.backend.refine_check(
            self.spec, tiling, self.shape, self.dtype, self.target, check
        )

    def evaluate(
        self, tiling: Tiling, *, source: str, progress: Progress, trial: int | None = None
    ) -> Outcome:
        """Check, build, run and measure one tiling; append its record.

        A tiling that has a record already (another worker's, made after this tuner started)
        is not evaluated again: that record's outcome is returned.
        """
        with self.db.session() as s:
            found = store.find_record(s, workload_id=self.workload_id, tiling_key=tiling.key())
        if found is not None:
            progress.duplicates += 1
            known = _outcome_of(found)
            if known.latency_us is not None and (
                progress.best_us is None or known.latency_us < progress.best_us
            ):
                progress.best_us, progress.best = known.latency_us, tiling
            return known
        fields: dict[str, Any] = {"source": source, "trial_number": trial}
        check = self.static_check(tiling)
        if not check.valid:
            progress.rejected_static += 1
            bad = {k: v for k, v in check.constraints.items() if v > 0}
            return self._record(
                tiling, Outcome("infeasible", None, bad), error="; ".join(check.reasons), **fields
            )

        build = self._build(tiling)
        if not build.ok:
            progress.evaluations += 1
            progress.failed += 1
            return self._record(
                tiling, Outcome("build_failed", None, {"build": 1.0}), error=build.error, **fields
            )
        over = {k: v for k, v in build.violations(self.limits).items() if v > 0}
        if over:
            progress.rejected_build += 1
            reason = (
                f"{build.spills} spills in loops (max {self.limits.max_loop_spills}), "
                f"stack {build.stack_bytes} B (max {self.limits.max_stack_bytes})"
            )
            return self._record(tiling, Outcome("infeasible", None, over), error=reason, **fields)

        run = self._launch(build, tiling, check=True, measure=self.measure)
        progress.evaluations += 1
        if not run.ok:
            progress.failed += 1
            return self._record(
                tiling, Outcome(run.status, None, {run.status: 1.0}), error=run.error, **fields
            )
        outcome = self._record(
            tiling,
            Outcome("ok", run.median_us),
            spread=run.spread,
            samples_us=list(run.samples_us),
            **fields,
        )
        if progress.best_us is None or (run.median_us or math.inf) < progress.best_us:
            progress.best_us, progress.best = run.median_us, tiling
        return outcome

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
        earlier = [o.latency_us for o in self._seen.values() if o.latency_us is not None]
        progress.best_us = min(earlier, default=None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            storage = optuna_storage(self.db.url)
            try:
                stopped = self._search(
                    storage, budget, progress, started, seed, on_progress, should_stop
                )
            finally:
                storage.engine.dispose()
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
        if stopped or not finish:
            return TuneResult(
                self.workload, None, None, progress, time.monotonic() - started, stopped=stopped
            )
        default = self.spec.default_tiling(self.shape, self.dtype, self.target)
        best, default_measured = self.finish(default)
        return TuneResult(
            self.workload, best, default_measured, progress, time.monotonic() - started
        )

    def _search(
        self,
        storage: optuna.storages.RDBStorage,
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
        dists = distributions(self.tunables)
        default = self.spec.default_tiling(self.shape, self.dtype, self.target)
        for tiling in self._warm_start():
            study.enqueue_trial(dict(tiling), skip_if_exists=True)
        if default.key() not in self._seen:
            # skip_if_exists: another worker on this study may have queued it already.
            study.enqueue_trial(dict(default), skip_if_exists=True)

        max_proposals = 25 * budget.evaluations + 200
        proposals = consecutive_duplicates = 0
        while progress.evaluations < budget.evaluations and proposals < max_proposals:
            if budget.seconds is not None and time.monotonic() - started > budget.seconds:
                break
            if self._job_budget_spent():
                break
            if should_stop is not None and should_stop():
                return True
            if self._all_variants_rejected():
                log.warning("every compile-time variant is rejected after its build: stopping")
                break
            proposals += 1
            trial = study.ask(dists)
            tiling = tiling_from_params(trial.params)
            key = tiling.key()
            if key in self._seen:
                outcome = self._seen[key]
                progress.duplicates += 1
                consecutive_duplicates += 1
                if consecutive_duplicates > 100:
                    log.info("the sampler keeps proposing measured tilings: space exhausted")
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    break
            elif self._running_elsewhere(study, trial):
                # Another worker is measuring this tiling now: its record will tell.
                progress.duplicates += 1
                consecutive_duplicates += 1
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                if on_progress is not None:
                    on_progress(progress)
                continue
            else:
                consecutive_duplicates = 0
                source = "default" if tiling == default else "search"
                outcome = self.evaluate(
                    tiling, source=source, progress=progress, trial=trial.number
                )
                self._seen[key] = outcome
            set_constraints(trial, outcome.constraints)
            study.tell(trial, outcome.latency_us if outcome.latency_us is not None else NO_TIME)
            if on_progress is not None:
                on_progress(progress)
        return False

    def _job_budget_spent(self) -> bool:
        """Whether the job's evaluations (this tuner's and its other workers') reached its
        budget."""
        if self.job is None or self.job.budget_evals is None:
            return False
        with self.db.session() as s:
            spent = store.job_evaluations(s, job_id=self.job.job_id)
        return spent >= self.job.budget_evals

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
            if t.key() not in self._seen
            and set(t) == set(domains)
            and all(t[name] in values for name, values in domains.items())
        ]

    def _running_elsewhere(self, study: optuna.Study, trial: optuna.Trial) -> bool:
        """Whether another running trial of the study has the same parameters.

        A trial older than one evaluation can take is left behind by a worker that was killed
        mid-trial: it is ignored, or its tiling would never be measured.
        """
        s = self.settings
        stale = datetime.now() - timedelta(  # Optuna stores naive local times
            seconds=s.build_timeout_s + 2 * s.run_timeout_s + s.max_measure_s
        )
        return any(
            other.number != trial.number
            and other.params == trial.params
            and other.datetime_start is not None
            and other.datetime_start > stale
            for other in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        )

    def _launch(
        self, build: BuildResult, tiling: Tiling, *, check: bool, measure: MeasureOptions
    ) -> RunResult:
        return self.backend.run(
            build,
            self.spec,
            shape=self.shape,
            dtype=self.dtype,
            target=self.target,
            tiling=tiling,
            check=check,
            measure=measure,
        )

    def _interleaved_samples(self, contenders: Mapping[str, Tiling]) -> dict[str, list[float]]:
        """Samples of every contender, taken in REMEASURE_ROUNDS rounds that visit each in turn.

        Measured one after the other, a contender whose window met a busy moment of the
        machine (another process, a frequency change) reads slow as a whole; in rounds every
        contender shares those moments. A contender that fails a round is dropped.
        """
        per_round = MeasureOptions(
            self.measure.warmup,
            max(1, math.ceil(self.measure.repeats / REMEASURE_ROUNDS)),
            self.measure.max_seconds / REMEASURE_ROUNDS,
        )

        def run(tiling: Tiling, measure: MeasureOptions) -> RunResult:
            return self._launch(self._build(tiling), tiling, check=False, measure=measure)

        # While the search fitted its surrogates one core sat idle, and a vCPU of these VMs
        # takes a few tens of ms to get its host core back: the first round's first runs read
        # up to 2x slow (perf showed one CPU's samples missing then). A warm-up of launches
        # brings both cores back before anything counts.
        run(next(iter(contenders.values())), MeasureOptions(0, 1_000_000, REMEASURE_WARM_S))
        samples: dict[str, list[float]] = {key: [] for key in contenders}
        for _ in range(REMEASURE_ROUNDS):
            for key in list(samples):
                result = run(contenders[key], per_round)
                if not result.ok or not result.samples_us:
                    del samples[key]
                    continue
                samples[key].extend(result.samples_us)
        return samples

    def finish(self, default: Tiling) -> tuple[Measured | None, Measured | None]:
        """Re-measure the best few and the default side by side; store the winner."""
        with self.db.session() as s:
            top = store.top_k(s, workload_id=self.workload_id, k=self.settings.remeasure_top + 4)
        contenders: dict[str, Tiling] = {}
        for record in top:
            if record.source != "remeasure" and record.tiling_key not in contenders:
                contenders[record.tiling_key] = Tiling(record.tiling)
            if len(contenders) == max(1, self.settings.remeasure_top):
                break
        if not contenders:
            return None, None
        default_ok = self._seen.get(default.key(), Outcome("none", None)).status == "ok"
        if default_ok:
            contenders.setdefault(default.key(), default)
        samples = self._interleaved_samples(contenders)
        latencies: dict[str, tuple[float, int]] = {}
        for key, times in samples.items():
            pooled = RunResult(status="ok", samples_us=tuple(times))
            median = pooled.median_us or 0.0  # every kept contender has samples
            rec = self._record(
                contenders[key],
                Outcome("ok", median),
                source="remeasure",
                spread=pooled.spread,
                samples_us=times,
            )
            latencies[key] = (median, rec.record_id or 0)
        if not latencies:
            return None, None
        best_key, default_key = min(latencies, key=lambda k: latencies[k][0]), default.key()
        if (
            best_key != default_key
            and default_key in samples
            and not beats_default(samples[best_key], samples[default_key])
        ):
            log.info(
                "%s: kept the default tiling: the fastest contender (%.1f us against %.1f us) "
                "was not faster beyond the noise of the re-measure",
                self.workload.study_name,
                latencies[best_key][0],
                latencies[default_key][0],
            )
            best_key = default_key
        best = Measured(contenders[best_key], latencies[best_key][0])
        default_measured = (
            Measured(default, latencies[default.key()][0]) if default.key() in latencies else None
        )
        speedup = default_measured.latency_us / best.latency_us if default_measured else None
        with self.db.session() as s:
            evaluations = sum(
                1
                for r in store.records_for(s, workload_id=self.workload_id)
                if r.status not in ("infeasible",) and r.source != "remeasure"
            )
            store.upsert_tiling(
                s,
                workload_id=self.workload_id,
                record_id=latencies[best_key][1],
                tiling=best.tiling,
                latency_us=best.latency_us,
                default_latency_us=default_measured.latency_us if default_measured else None,
                speedup=speedup,
                evaluations=evaluations,
            )
        return best, default_measured


def beats_default(candidate: list[float], default: list[float]) -> bool:
    """Whether ``candidate``'s times are smaller than ``default``'s beyond noise.

    On a shared machine the fastest of a few contenders within a percent or two of the default
    is as often the luckiest as the best; storing it would report a speedup that the next
    measurement does not show (a tuned tiling that then reads slower than the default). So a
    contender must be faster in a one-sided Mann-Whitney test at ``BEATS_DEFAULT_P``: with the
    default settings' 9 samples each (3 rounds of 3), times that all lie below the default's
    pass easily (p = 2e-5), two overlapping sets do not.
    """
    if not candidate or not default:
        return False
    from scipy.stats import mannwhitneyu  # scikit-learn's dependency; slow to import

    return bool(mannwhitneyu(candidate, default, alternative="less").pvalue < BEATS_DEFAULT_P)


def _outcome_of(record: Any) -> Outcome:
    return Outcome(record.status, record.latency_us, dict(record.constraints or {}), record.id)
