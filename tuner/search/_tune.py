"""One tuning run of one workload: an Optuna study driven by ask-and-tell.

For every proposal the cheap checks run first, so a tiling that cannot work costs neither a
compile nor a launch:

1. static check — footprint per memory against the target, the op's validity rules;
2. build — the compile-time part only (cached); spills in loops and the stack frame;
3. run — the first launch is checked against the numpy reference;
4. measure — warm-up, repeats, median and spread.

Every outcome is appended to the records; Optuna sees failures as constraint violations
(``trial.set_constraint``), so TPE learns to stay away from them. The default tiling is
measured first, a tiling already measured for the workload is never measured again, and at the
end the best few and the default are re-measured side by side before the winner is stored.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from kernels.backends import Backend, BuildLimits, BuildResult, MeasureOptions
from kernels.ops import OpSpec
from kernels.targets import TargetProfile
from tuner import store
from tuner.search._space import distributions, tiling_from_params
from tuner.settings import Settings
from tuner.types import Shape, Tiling, Workload

log = logging.getLogger(__name__)

#: Value told to Optuna for a trial that produced no time; its constraints mark it infeasible.
NO_TIME = math.inf


@dataclass(frozen=True)
class Budget:
    evaluations: int
    seconds: float | None = None


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
            "failed": p.failed,
            "seconds": round(self.seconds, 3),
        }


def make_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    with warnings.catch_warnings():
        # multivariate TPE and constant_liar are marked experimental; both are long-standing
        # and the joint model matters here: tiling fields interact (baseM × baseN ...).
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8
        )


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(url, engine_kwargs=store.optuna_engine_kwargs(url))


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
    ) -> None:
        self.spec, self.shape, self.dtype, self.target = spec, shape, dtype, target
        self.backend, self.db, self.settings = backend, db, settings
        self.workload = Workload(spec.name, spec.version, target.name, dtype, shape)
        self.tunables = spec.tunables(shape, dtype, target)
        self.measure = MeasureOptions(settings.warmup, settings.repeats, settings.max_measure_s)
        self.limits = BuildLimits(settings.max_loop_spills, settings.max_stack_bytes)
        self.env = {**backend.environment(), "target": target.name}
        self._builds: dict[str, BuildResult] = {}
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
            row = store.add_record(
                s,
                workload_id=self.workload_id,
                tiling=tiling,
                status=outcome.status,
                latency_us=outcome.latency_us,
                constraints=outcome.constraints or None,
                env=self.env,
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

    def evaluate(
        self, tiling: Tiling, *, source: str, progress: Progress, trial: int | None = None
    ) -> Outcome:
        """Check, build, run and measure one tiling; append its record."""
        fields: dict[str, Any] = {"source": source, "trial_number": trial}
        check = self.spec.check(tiling, self.shape, self.dtype, self.target)
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

        run = self.backend.run(
            build,
            self.spec,
            shape=self.shape,
            dtype=self.dtype,
            target=self.target,
            tiling=tiling,
            check=True,
            measure=self.measure,
        )
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
    ) -> TuneResult:
        started = time.monotonic()
        progress = Progress(budget=budget.evaluations)
        earlier = [o.latency_us for o in self._seen.values() if o.latency_us is not None]
        progress.best_us = min(earlier, default=None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = optuna_storage(self.db.url)
        try:
            self._search(storage, budget, progress, started, seed, on_progress, should_stop)
        finally:
            storage.engine.dispose()
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
    ) -> None:
        study = optuna.create_study(
            study_name=self.workload.study_name,
            storage=storage,
            sampler=make_sampler(seed),
            direction="minimize",
            load_if_exists=True,
        )
        dists = distributions(self.tunables)
        default = self.spec.default_tiling(self.shape, self.dtype, self.target)
        if default.key() not in self._seen:
            study.enqueue_trial(dict(default))

        max_proposals = 25 * budget.evaluations + 200
        proposals = consecutive_duplicates = 0
        while progress.evaluations < budget.evaluations and proposals < max_proposals:
            if budget.seconds is not None and time.monotonic() - started > budget.seconds:
                break
            if should_stop is not None and should_stop():
                break
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
            else:
                consecutive_duplicates = 0
                source = "default" if tiling == default else "search"
                outcome = self.evaluate(
                    tiling, source=source, progress=progress, trial=trial.number
                )
                self._seen[key] = outcome
            for name, value in outcome.constraints.items():
                trial.set_constraint(name, value)
            study.tell(trial, outcome.latency_us if outcome.latency_us is not None else NO_TIME)
            if on_progress is not None:
                on_progress(progress)

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
        latencies: dict[str, tuple[float, int]] = {}
        for key, tiling in contenders.items():
            run = self.backend.run(
                self._build(tiling),
                self.spec,
                shape=self.shape,
                dtype=self.dtype,
                target=self.target,
                tiling=tiling,
                check=False,
                measure=self.measure,
            )
            if not run.ok or run.median_us is None:
                continue
            rec = self._record(
                tiling,
                Outcome("ok", run.median_us),
                source="remeasure",
                spread=run.spread,
                samples_us=list(run.samples_us),
            )
            latencies[key] = (run.median_us, rec.record_id or 0)
        candidates = {k: v for k, v in latencies.items() if k in contenders}
        if not candidates:
            return None, None
        best_key = min(candidates, key=lambda k: candidates[k][0])
        best = Measured(contenders[best_key], candidates[best_key][0])
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
                record_id=candidates[best_key][1],
                tiling=best.tiling,
                latency_us=best.latency_us,
                default_latency_us=default_measured.latency_us if default_measured else None,
                speedup=speedup,
                evaluations=evaluations,
            )
        return best, default_measured


def _outcome_of(record: Any) -> Outcome:
    return Outcome(record.status, record.latency_us, dict(record.constraints or {}), record.id)
