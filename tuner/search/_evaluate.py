"""The evaluation of one tiling: static check, build, run, measure, record.

The cheap checks run first, so a tiling that cannot work costs neither a compile nor a launch:

1. static check — footprint per memory against the target, the op's validity rules, refined by
   the backend (``Backend.refine_check``);
2. build — the compile-time part only (cached); spills in loops and the stack frame;
3. run — the first launch is checked against the numpy reference;
4. measure — warm-up, repeats, median and spread.

Every outcome is appended to the records, failures included (they carry constraint values, > 0
violated, for the study). A tiling that has a record already is never evaluated again: several
tuners (workers) may share one workload, and each re-reads the records right before it
evaluates. A job's records carry its id while the worker holds or assists the job and, for
evaluations, the job's budget is not spent (:class:`JobTag`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tilewise import store
from tilewise.kernels.backends import Backend, BuildLimits, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import Check, OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.settings import Settings
from tilewise.status import RecordSource
from tilewise.store import RecordStatus
from tilewise.types import Shape, Tiling, Workload


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
    proposals: int = 0  # tilings the strategy proposed

    @property
    def infeasible(self) -> int:
        return self.rejected_static + self.rejected_build


@dataclass(frozen=True)
class Outcome:
    status: str  # a RecordStatus
    latency_us: float | None
    constraints: dict[str, float] = field(default_factory=dict)
    record_id: int | None = None

    @property
    def value(self) -> float | None:
        """What the study minimises: the latency; None when the tiling did not run."""
        return self.latency_us


def outcome_of(record: Any) -> Outcome:
    """The outcome a record keeps."""
    return Outcome(record.status, record.latency_us, dict(record.constraints or {}), record.id)


class Evaluator:
    """Evaluates tilings of one workload on one backend and records every outcome.

    ``seen`` holds the outcome of every tiling with a record when the evaluator was made (but
    those of re-measures) and is kept for the search: a tiling in it is not proposed again.
    """

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
    ) -> None:
        self.spec, self.shape, self.dtype, self.target = spec, shape, dtype, target
        self.backend, self.db, self.settings, self.job = backend, db, settings, job
        self.workload = Workload(spec.name, spec.version, target.name, dtype, shape)
        self.measure = MeasureOptions(
            settings.warmup, settings.repeats, settings.max_measure_s, settings.warmup_s
        )
        self.limits = BuildLimits(settings.max_loop_spills, settings.max_stack_bytes)
        self.env = {**backend.environment(), "target": target.name}
        self._builds: dict[str, BuildResult] = {}
        with db.session() as s:
            self.workload_id = store.commit_workload(s, self.workload).id
            self.seen: dict[str, Outcome] = {
                r.tiling_key: outcome_of(r)
                for r in store.records_for(s, workload_id=self.workload_id)
                if r.source != RecordSource.REMEASURE
            }

    def record(self, tiling: Tiling, outcome: Outcome, **fields: Any) -> Outcome:
        """Append ``outcome`` of ``tiling`` to the records; the outcome with its record's id."""
        with self.db.session() as s:
            # A job that is not held any more (reclaimed, cancelled) keeps no record of this
            # worker's: the record still serves the study, it is not one of the job's
            # evaluations.
            # Neither is a record of an assistant that stopped assisting, nor an evaluation
            # beyond the job's budget (another worker of the job spent it meanwhile).
            counts = (
                outcome.status != RecordStatus.INFEASIBLE
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

    def build(self, tiling: Tiling) -> BuildResult:
        """The build of ``tiling``'s compile-time part, asked of the backend once per variant."""
        defines = self.spec.compile_key(tiling, self.dtype)
        key = repr(sorted(defines.items()))
        if key not in self._builds:
            self._builds[key] = self.backend.build(self.spec, defines)
        return self._builds[key]

    def all_variants_rejected(self) -> bool:
        """Whether every compile-time variant of the op failed its build or its build checks."""
        variants = 1
        for tunable in self.spec.compile_tunables:
            variants *= len(tunable.values)
        rejected = [
            b
            for b in self._builds.values()
            if not b.ok or any(v > 0 for v in b.violations(self.limits).values())
        ]
        return len(rejected) >= variants

    def launch(
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

    def static_check(self, tiling: Tiling) -> Check:
        """The op's checks, refined by the backend (``Backend.refine_check``: on Ascend targets
        with ``ub_check=compiler``, bishengir-compile's UB verdict on the kernel's buffer plan
        instead of the analytic footprint)."""
        check = self.spec.check(tiling, self.shape, self.dtype, self.target)
        return self.backend.refine_check(
            self.spec, tiling, self.shape, self.dtype, self.target, check
        )

    def evaluate(
        self, tiling: Tiling, *, source: RecordSource, progress: Progress, trial: int | None = None
    ) -> Outcome:
        """Check, build, run and measure one tiling; append its record.

        A tiling that has a record already (another worker's, made after this tuner started)
        is not evaluated again: that record's outcome is returned.
        """
        with self.db.session() as s:
            found = store.find_record(s, workload_id=self.workload_id, tiling_key=tiling.key())
        if found is not None:
            progress.duplicates += 1
            known = outcome_of(found)
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
            return self.record(
                tiling,
                Outcome(RecordStatus.INFEASIBLE, None, bad),
                error="; ".join(check.reasons),
                **fields,
            )

        build = self.build(tiling)
        if not build.ok:
            progress.evaluations += 1
            progress.failed += 1
            return self.record(
                tiling,
                Outcome(RecordStatus.BUILD_FAILED, None, {"build": 1.0}),
                error=build.error,
                **fields,
            )
        over = {k: v for k, v in build.violations(self.limits).items() if v > 0}
        if over:
            progress.rejected_build += 1
            reason = (
                f"{build.spills} spills in loops (max {self.limits.max_loop_spills}), "
                f"stack {build.stack_bytes} B (max {self.limits.max_stack_bytes})"
            )
            return self.record(
                tiling, Outcome(RecordStatus.INFEASIBLE, None, over), error=reason, **fields
            )

        run = self.launch(build, tiling, check=True, measure=self.measure)
        progress.evaluations += 1
        if not run.ok:
            progress.failed += 1
            return self.record(
                tiling, Outcome(run.status, None, {run.status: 1.0}), error=run.error, **fields
            )
        outcome = self.record(
            tiling,
            Outcome(RecordStatus.OK, run.median_us),
            spread=run.spread,
            samples_us=list(run.samples_us),
            **fields,
        )
        if progress.best_us is None or (run.median_us or math.inf) < progress.best_us:
            progress.best_us, progress.best = run.median_us, tiling
        return outcome
