"""The evaluation of one tiling in a search: :meth:`Measurer.attempt
<tilewise.search._measure.Measurer.attempt>` (static check, build, run, measure), recorded.

Every outcome is appended to the records, failures included (they carry constraint values, > 0
violated, for the study). A tiling that has a record already is never evaluated again: several
tuners (workers) may share one workload, and each re-reads the records right before it
evaluates. A job's records carry its id while the worker holds or assists the job and, for
evaluations, the job's budget is not spent (:class:`JobTag`).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tilewise import store
from tilewise.kernels.backends import Backend
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.search._measure import Measurer
from tilewise.search._timing import ProposeTimes
from tilewise.settings import Settings
from tilewise.status import RecordSource
from tilewise.store import RecordStatus
from tilewise.types import Shape, Tiling, Workload


@dataclass(frozen=True)
class JobTag:
    """The job a worker's tuner works for: its records carry ``job_id`` while ``worker_id``
    holds or assists the running job and, for evaluations, the job's budget is not spent
    (:func:`tilewise.store.tag_record`), so the job's evaluations are counted exactly from the
    records.

    With ``budget_evals`` the search also ends as soon as the job has spent that many
    evaluations, whoever spent them (its holder or its assistants).
    """

    job_id: int
    worker_id: str
    budget_evals: int | None = None


_TUNE = "tune@"
_HOST = socket.gethostname()


def _tune_alive(claimant: str) -> bool:
    """False for the claim of a tune of this host whose process is gone; True otherwise (a
    worker's, another host's: their liveness is told otherwise). Containers that share a host
    name but not a pid namespace would misjudge each other's tunes (a tiling measured twice,
    nothing lost); a fleet runs workers, whose heartbeats tell."""
    owner = claimant.partition("/")[0]
    host, _, pid = owner.removeprefix(_TUNE).rpartition(":")
    if not owner.startswith(_TUNE) or host != _HOST or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


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
    propose: ProposeTimes = field(default_factory=ProposeTimes)  # its seconds per proposal

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


class Evaluator(Measurer):
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
        super().__init__(
            spec=spec, shape=shape, dtype=dtype, target=target, backend=backend, settings=settings
        )
        self.db, self.job = db, job
        self.workload = Workload(spec.name, spec.version, target.name, dtype, shape)
        self.env = {**backend.environment(), "target": target.name}
        self.toolchain = backend.toolchain(target)
        with db.session() as s:
            self.workload_id = store.commit_workload(s, self.workload).id
            if job is not None:
                store.release_worker_claims(
                    s, workload_id=self.workload_id, worker_id=job.worker_id
                )
            # A tune of this host that died mid-evaluation (SIGKILL, a crash) left its claim;
            # live by its age for an evaluation's bound, it would hold its tiling that long.
            #: The tilings whose evaluations died with their tune: its trials of them are
            #: still running in the study, and nobody else will end them.
            self.orphaned: set[str] = set()
            for key, claimant in store.claims_named(
                s, workload_id=self.workload_id, prefix=f"{_TUNE}{_HOST}:"
            ):
                if not _tune_alive(claimant):
                    store.release_claim(
                        s, workload_id=self.workload_id, tiling_key=key, claimant=claimant
                    )
                    self.orphaned.add(key)
            self.seen: dict[str, Outcome] = {
                r.tiling_key: outcome_of(r)
                for r in store.records_for(s, workload_id=self.workload_id)
                if r.source != RecordSource.REMEASURE
            }
        #: The tilings earlier runs measured: a default whose record there failed (a timeout,
        #: limits since changed) is measured again at the finish.
        self.earlier: set[str] = set(self.seen)
        #: Keys of the tilings the search left to another worker that claimed them
        #: (:meth:`claim`): their records are that worker's to write.
        self.elsewhere: set[str] = set()
        #: Who this evaluator's claims name: its job's worker, and one evaluator of it.
        #: A tune outside a worker names its host and process: a later tune of this host can
        #: tell that it died (a worker's claims are told by its heartbeat).
        owner = f"{_TUNE}{_HOST}:{os.getpid()}" if job is None else job.worker_id
        self.claimant = f"{owner}/{uuid.uuid4().hex[:12]}"

    @property
    def evaluation_bound_s(self) -> float:
        """The longest one evaluation can take: its build, two runs and the measurement."""
        s = self.settings
        return s.build_timeout_s + 2 * s.run_timeout_s + s.max_measure_s

    def live_since(self) -> dict[str, datetime]:
        """Since when a claim is live (:func:`tilewise.store.claim_tiling`): made within one
        evaluation's bound, by a worker with a heartbeat within a lease."""
        now = datetime.now(UTC)
        return {
            "since": now - timedelta(seconds=self.evaluation_bound_s),
            "alive_since": now - timedelta(seconds=self.settings.lease_s),
        }

    def claim(self, tiling: Tiling) -> bool:
        """Take ``tiling`` to measure (:func:`tilewise.store.claim_tiling`); False when another
        worker sharing the workload claimed it first: it is added to :attr:`elsewhere`, and its
        record is that worker's to write."""
        with self.db.session() as s:
            mine = store.claim_tiling(
                s,
                workload_id=self.workload_id,
                tiling_key=tiling.key(),
                claimant=self.claimant,
                worker_id=None if self.job is None else self.job.worker_id,
                **self.live_since(),
            )
        if not mine:
            self.elsewhere.add(tiling.key())
        return mine

    def release(self, tiling: Tiling) -> None:
        """Give up the claim of ``tiling``, whose evaluation ended without a record (a record
        ends its claim: :meth:`record`)."""
        with self.db.session() as s:
            store.release_claim(
                s, workload_id=self.workload_id, tiling_key=tiling.key(), claimant=self.claimant
            )

    def awaited(self, tiling: Tiling) -> Outcome | None:
        """The outcome another worker records for ``tiling``, a tiling the search left to it
        (:attr:`elsewhere`): waited for as long as one evaluation can take, None when no record
        came (that worker died mid-trial, say) or the search measured ``tiling`` itself."""
        if tiling.key() not in self.elsewhere:
            return None
        s = self.settings
        deadline = time.monotonic() + self.evaluation_bound_s
        while True:
            with self.db.session() as session:
                claimant = store.claimant_of(
                    session, workload_id=self.workload_id, tiling_key=tiling.key()
                )
                # Read after the claim: a record ends its claim in the same transaction.
                found = store.find_record(
                    session, workload_id=self.workload_id, tiling_key=tiling.key()
                )
            if found is not None:
                return outcome_of(found)
            if claimant is None or not _tune_alive(claimant) or time.monotonic() >= deadline:
                return None  # given up without a record, its tune dead, or out of time
            time.sleep(min(s.poll_s, max(0.0, deadline - time.monotonic())))

    def measure_default(self, default: Tiling, *, again: bool = False) -> Outcome:
        """``default`` evaluated at the finish, the search having left it unmeasured (or, with
        ``again``, its record of an earlier run failed)."""
        return self.evaluate(
            default, source=RecordSource.DEFAULT, progress=Progress(budget=1), again=again
        )

    def record(self, tiling: Tiling, outcome: Outcome, **fields: Any) -> Outcome:
        """Append ``outcome`` of ``tiling`` to the records; the outcome with its record's id."""
        remeasure = fields.get("source") == store.SOURCE_REMEASURE
        counts = outcome.status != RecordStatus.INFEASIBLE and not remeasure
        with self.db.session() as s:
            row = store.add_record(
                s,
                workload_id=self.workload_id,
                tiling=tiling,
                status=outcome.status,
                latency_us=outcome.latency_us,
                constraints=outcome.constraints or None,
                env=self.env,
                toolchain=self.toolchain,
                job_id=None if self.job is None else self.job.job_id,
                **fields,
            )
            if not remeasure:  # a re-measure claims nothing: its tiling was recorded before
                store.release_claim(
                    s, workload_id=self.workload_id, tiling_key=tiling.key(), claimant=self.claimant
                )
            # Last in the transaction: it may lock the job's row until the commit. A job that
            # is not held any more (reclaimed, cancelled) keeps no record of this worker's: the
            # record still serves the study, it is not one of the job's evaluations. Neither is
            # a record of an assistant that stopped assisting, nor an evaluation beyond the
            # job's budget (another worker of the job spent it meanwhile).
            if self.job is not None:
                store.tag_record(
                    s,
                    record_id=row.id,
                    job_id=self.job.job_id,
                    worker_id=self.job.worker_id,
                    counts=counts,
                )
        return Outcome(outcome.status, outcome.latency_us, outcome.constraints, row.id)

    def evaluate(
        self,
        tiling: Tiling,
        *,
        source: RecordSource,
        progress: Progress,
        trial: int | None = None,
        again: bool = False,
    ) -> Outcome:
        """Check, build, run and measure one tiling (:meth:`attempt`); append its record.

        A tiling that has a record already (another worker's, made after this tuner started)
        is not evaluated again, unless ``again``: that record's outcome is returned.
        """
        with self.db.session() as s:
            found = (
                None
                if again
                else store.find_record(s, workload_id=self.workload_id, tiling_key=tiling.key())
            )
            if found is not None:  # recorded by another worker before this one claimed it
                store.release_claim(
                    s, workload_id=self.workload_id, tiling_key=tiling.key(), claimant=self.claimant
                )
        if found is not None:
            progress.duplicates += 1
            known = outcome_of(found)
            if known.latency_us is not None and (
                progress.best_us is None or known.latency_us < progress.best_us
            ):
                progress.best_us, progress.best = known.latency_us, tiling
            return known
        fields: dict[str, Any] = {"source": source, "trial_number": trial}
        attempt = self.attempt(tiling)
        if attempt.stage == "static":
            progress.rejected_static += 1
        elif attempt.status == RecordStatus.INFEASIBLE:  # over the build limits
            progress.rejected_build += 1
        else:  # built and launched, or its build failed
            progress.evaluations += 1
            if attempt.status != RecordStatus.OK:
                progress.failed += 1
        # The outcome's fields go through self.record (it tags the job); the rest as they are.
        recorded = attempt.record_fields()
        status, latency = recorded.pop("status"), recorded.pop("latency_us")
        constraints = recorded.pop("constraints", None) or {}
        outcome = self.record(tiling, Outcome(status, latency, constraints), **recorded, **fields)
        if latency is not None and (progress.best_us is None or latency < progress.best_us):
            progress.best_us, progress.best = latency, tiling
        return outcome
