"""The worker: one target (and device), claiming jobs, holding leases, running studies, and
assisting a running job when there is none to claim (see :mod:`tilewise.worker`)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tilewise import store
from tilewise.errors import InputError, StoreError
from tilewise.settings import Settings
from tilewise.store import JobRow, JobStatus, WorkerStatus
from tilewise.worker._jobs import JobError, job_inputs, worker_id_for

if TYPE_CHECKING:
    from tilewise.kernels.backends import Backend
    from tilewise.search import Progress, Tuner, TuneResult

log = logging.getLogger("tilewise.worker")

#: A job claimed this many times without finishing (its workers keep dying) fails.
MAX_ATTEMPTS = 5

#: Progress of a running job is written at most this often (seconds).
PROGRESS_EVERY_S = 1.0


@dataclass
class _Held:
    """The job this worker holds right now."""

    job: JobRow
    spent_before: int  # the job's evaluations when it was claimed
    lost: threading.Event = field(default_factory=threading.Event)
    last_progress: float = 0.0


@dataclass
class _Assisting:
    """The job this worker assists right now."""

    job: JobRow
    lost: threading.Event = field(default_factory=threading.Event)


class Worker:
    """Claims and runs jobs of one target until :meth:`stop` (thread-safe) is called.

    ``backend`` is for tests; by default the target's backend is created (and closed) here.
    ``max_jobs`` and ``exit_when_idle`` end :meth:`run` early (batch use, tests).
    ``parent_pid``: stop when the parent process is gone (workers started by ``serve``).
    ``strategy``: the search strategy of the studies it runs and assists (see
    ``tilewise.search.STRATEGIES``).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        target: str = "cpu-twin",
        device: int | None = None,
        db: store.Store | None = None,
        backend: Backend | None = None,
        worker_id: str | None = None,
        max_jobs: int | None = None,
        exit_when_idle: bool = False,
        parent_pid: int | None = None,
        strategy: str = "default",
    ) -> None:
        from tilewise.kernels.targets import get_target
        from tilewise.search._strategies import preload

        preload(strategy)
        self.strategy = strategy

        self.settings = settings
        self.target = get_target(target)
        self.device = device
        self.id = worker_id or worker_id_for(self.target.name, device)
        self.max_jobs, self.exit_when_idle, self.parent_pid = max_jobs, exit_when_idle, parent_pid
        if settings.heartbeat_s >= settings.lease_s:
            raise InputError(
                f"heartbeat_s ({settings.heartbeat_s}) must be below lease_s ({settings.lease_s})"
                " or every lease expires before it is renewed"
            )
        self._own_db = db is None
        self.db = db if db is not None else store.open_store(settings.db_url)
        self._own_backend = backend is None
        created: Backend | None = None
        try:
            if backend is None:
                from tilewise.kernels.backends import create_backend

                backend = created = create_backend(
                    self.target.backend,
                    settings=settings,
                    target=self.target,
                    device=self.device or 0,
                )
            # A host that cannot run the target's kernels (CANN without an NPU) would claim
            # every job of the target and fail it: it serves none.
            backend.check_runnable()
        except BaseException:
            if created is not None:
                created.close()
            if self._own_db:
                self.db.close()
            raise
        self.backend: Backend = backend
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._held: _Held | None = None
        self._assisting: _Assisting | None = None
        # Jobs this worker could not hand back (the database unreachable): handed back once it
        # answers again, rather than left running until their leases run out.
        self._unreleased: list[_Held] = []
        self.jobs_done = 0
        self.jobs_assisted = 0

    # -- control -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the worker to stop: the trial in flight completes, then the job is finished (its
        budget is spent) or handed back to the queue, and :meth:`run` returns."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self._stop.set()  # orphaned: the supervisor died
        return self._stop.is_set()

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        """Claim and run jobs until stopped; returns how many jobs this worker ran."""
        self._beat()
        beats = threading.Thread(target=self._heartbeat_loop, name="tw-heartbeat", daemon=True)
        beats.start()
        log.info("worker %s: serving target %s on %s", self.id, self.target.name, self.db.safe_url)
        try:
            while not self.stopping:
                self._release_pending()
                try:
                    job = self._claim()
                except StoreError as exc:
                    log.warning("worker %s: cannot claim: %s", self.id, exc)
                    job = None
                if job is None:
                    if self._assist():
                        # Do not assist again at once (the job may be out of tilings to try).
                        self._stop.wait(self.settings.poll_s)
                        continue
                    if self.exit_when_idle:
                        break
                    self._stop.wait(self.settings.poll_s)
                    continue
                self._run_job(job)
                self.jobs_done += 1
                if self.max_jobs is not None and self.jobs_done >= self.max_jobs:
                    break
        finally:
            self._release_pending()
            self._closed.set()
            beats.join(timeout=10)
            self._beat(status=WorkerStatus.STOPPED)
            self.close()
        return self.jobs_done

    def close(self) -> None:
        if self._own_backend:
            self.backend.close()
        if self._own_db:
            self.db.close()

    def _claim(self) -> JobRow | None:
        with self.db.session() as s:
            job = store.claim_job(
                s,
                worker_id=self.id,
                lease_seconds=self.settings.lease_s,
                targets=[self.target.name],
            )
            if job is None:
                return None
        spent = job.spent_evals
        with self._lock:
            self._held = _Held(job, spent)
        log.info(
            "worker %s: claimed job %d (attempt %d, %d of %d evaluations spent)",
            self.id,
            job.id,
            job.attempts,
            spent,
            job.budget_evals,
        )
        self._beat()
        return job

    # -- heartbeat ---------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._closed.wait(self.settings.heartbeat_s):
            self._beat()

    def _beat(self, status: WorkerStatus | None = None) -> None:
        with self._lock:
            held, assisting = self._held, self._assisting
        if status is None:
            busy = held is not None or assisting is not None
            status = WorkerStatus.BUSY if busy else WorkerStatus.IDLE
        try:
            with self.db.session() as s:
                store.heartbeat_worker(
                    s,
                    worker_id=self.id,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    target=self.target.name,
                    device=self.device,
                    status=status,
                )
                if held is not None and not held.lost.is_set():
                    renewed = store.renew_lease(
                        s,
                        job_id=held.job.id,
                        worker_id=self.id,
                        lease_seconds=self.settings.lease_s,
                    )
                    if not renewed:
                        log.warning(
                            "worker %s: job %d is no longer ours (cancelled or reclaimed)",
                            self.id,
                            held.job.id,
                        )
                        held.lost.set()
                if (
                    assisting is not None
                    and not assisting.lost.is_set()
                    and not store.renew_assist(s, job_id=assisting.job.id, worker_id=self.id)
                ):
                    log.info(
                        "worker %s: stops assisting job %d (not running any more)",
                        self.id,
                        assisting.job.id,
                    )
                    assisting.lost.set()
        except StoreError as exc:
            # The lease may run out meanwhile: then another worker resumes the job, and this
            # one's records stop counting for it (see the module docstring).
            log.warning("worker %s: heartbeat failed: %s", self.id, exc)

    # -- one job -----------------------------------------------------------------------------
    def _run_job(self, job: JobRow) -> None:
        with self._lock:
            held = self._held
        assert held is not None and held.job.id == job.id
        try:
            self._tune(held)
        except JobError as exc:
            log.error("worker %s: job %d failed: %s", self.id, job.id, exc)
            self._fail(held, str(exc))
        except StoreError as exc:
            # The database, not the job: hand it back (or let its lease run out) rather than
            # fail it; MAX_ATTEMPTS bounds the retries.
            log.error("worker %s: job %d: %s", self.id, job.id, exc)
            self._release(held)
        except Exception as exc:
            log.exception("worker %s: job %d failed", self.id, job.id)
            self._fail(held, f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._held = None
            self._beat()

    def _tuner(self, job: JobRow) -> Tuner:
        """A tuner of the job's workload whose records are tagged with the job."""
        from tilewise.search import JobTag, Tuner

        with self.db.session() as s:
            workload = store.get_workload(s, workload_id=job.workload_id)
        if workload is None:  # pragma: no cover - a foreign key guarantees it
            raise JobError(f"job {job.id}: workload {job.workload_id} does not exist")
        inputs = job_inputs(workload, settings=self.settings)
        if inputs.target.name != self.target.name:  # pragma: no cover - claim_job filters
            raise JobError(f"job {job.id} is for target {inputs.target.name}, not {self.target}")
        tuner = Tuner(
            spec=inputs.spec,
            shape=inputs.shape,
            dtype=inputs.dtype,
            target=inputs.target,
            backend=self.backend,
            db=self.db,
            settings=self.settings,
            job=JobTag(job.id, self.id, budget_evals=job.budget_evals),
            strategy=self.strategy,
        )
        if tuner.workload_id != job.workload_id:  # pragma: no cover - job_inputs checks it
            raise JobError(f"job {job.id}: its workload does not match {tuner.workload.key}")
        return tuner

    def _tune(self, held: _Held) -> None:
        from tilewise.search import Budget

        job = held.job
        if job.attempts > MAX_ATTEMPTS:
            raise JobError(
                f"job {job.id} was claimed {job.attempts} times without finishing; giving up"
            )
        tuner = self._tuner(job)

        def on_progress(progress: Progress) -> None:
            now = time.monotonic()
            if now - held.last_progress < PROGRESS_EVERY_S:
                return
            held.last_progress = now
            with self.db.session() as s:
                ours = store.update_job_progress(
                    s,
                    job_id=job.id,
                    worker_id=self.id,
                    # Its assistants' evaluations too.
                    evaluations=store.job_evaluations(s, job_id=job.id),
                    best_latency_us=progress.best_us,
                    speedup=None,
                )
            if not ours:
                held.lost.set()

        def should_stop() -> bool:
            return self.stopping or held.lost.is_set()

        remaining = max(0, job.budget_evals - held.spent_before)
        result = tuner.run(
            Budget(remaining, job.budget_seconds),
            seed=job.seed,
            on_progress=on_progress,
            should_stop=should_stop,
        )
        self._settle(held, result)

    # -- assisting ---------------------------------------------------------------------------
    def _assist(self) -> bool:
        """Assist a running job of this worker's target until it needs no more help; False if
        no job needs one."""
        from tilewise.search import Budget

        if self.settings.max_assistants_per_job < 1 or self.stopping:
            return False
        try:
            with self.db.session() as s:
                job = store.assist_job(
                    s,
                    worker_id=self.id,
                    max_assistants=self.settings.max_assistants_per_job,
                    lease_seconds=self.settings.lease_s,
                    targets=[self.target.name],
                )
        except StoreError as exc:
            log.warning("worker %s: cannot assist: %s", self.id, exc)
            return False
        if job is None:
            return False
        assisting = _Assisting(job)
        with self._lock:
            self._assisting = assisting
        log.info(
            "worker %s: assists job %d (held by %s, %d of %d evaluations spent)",
            self.id,
            job.id,
            job.worker_id,
            job.spent_evals,
            job.budget_evals,
        )
        self._beat()

        def should_stop() -> bool:
            if self.stopping or assisting.lost.is_set():
                return True
            with self.db.session() as s:
                current = store.get_job(s, job_id=job.id)
            return current is None or current.status is not JobStatus.RUNNING

        try:
            result = self._tuner(job).run(
                Budget(max(0, job.budget_evals - job.spent_evals), job.budget_seconds),
                seed=None,  # not the holder's seed: its sampler would propose the same tilings
                should_stop=should_stop,
                finish=False,
            )
            log.info(
                "worker %s: stopped assisting job %d after %d evaluations of its own",
                self.id,
                job.id,
                result.progress.evaluations,
            )
        except (JobError, StoreError) as exc:
            log.warning("worker %s: cannot assist job %d: %s", self.id, job.id, exc)
        except Exception:
            log.exception("worker %s: assisting job %d failed", self.id, job.id)
        finally:
            with self._lock:
                self._assisting = None
            try:
                with self.db.session() as s:
                    store.end_assist(s, job_id=job.id, worker_id=self.id)
            except StoreError as exc:  # the row goes stale, then the next assistant drops it
                log.warning("worker %s: cannot end assisting job %d: %s", self.id, job.id, exc)
            self._beat()
        self.jobs_assisted += 1
        return True

    def _settle(self, held: _Held, result: TuneResult) -> None:
        job = held.job
        with self.db.session() as s:
            spent = store.job_evaluations(s, job_id=job.id)
        if held.lost.is_set():
            log.info("worker %s: left job %d (not ours any more)", self.id, job.id)
            return
        if result.stopped:
            with self.db.session() as s:
                released = store.release_job(
                    s,
                    job_id=job.id,
                    worker_id=self.id,
                    evaluations=spent,
                    best_latency_us=result.progress.best_us,
                    attempted=False,  # stopped (SIGTERM): a restart is no failed attempt
                )
            log.info(
                "worker %s: job %d %s after %d of %d evaluations",
                self.id,
                job.id,
                "handed back to the queue" if released else "was not ours any more",
                spent,
                job.budget_evals,
            )
            return
        if result.best is None:
            see = ": see the workload's records for the reasons"
            self._fail(held, result.why_no_best(job.budget_seconds, see))
            return
        with self.db.session() as s:
            finished = store.finish_job(
                s,
                job_id=job.id,
                worker_id=self.id,
                status=JobStatus.SUCCEEDED,
                evaluations=spent,
                best_latency_us=result.best.latency_us,
                speedup=result.speedup,
            )
        log.info(
            "worker %s: job %d %s: best %.1f us, speedup %s, %d evaluations",
            self.id,
            job.id,
            "succeeded" if finished else "done, but not ours any more",
            result.best.latency_us,
            f"{result.speedup:.2f}x" if result.speedup else "n/a",
            spent,
        )

    def _release(self, held: _Held) -> None:
        try:
            with self.db.session() as s:
                store.release_job(
                    s,
                    job_id=held.job.id,
                    worker_id=self.id,
                    evaluations=store.job_evaluations(s, job_id=held.job.id),
                )
        except StoreError as exc:
            log.warning("worker %s: cannot hand job %d back: %s", self.id, held.job.id, exc)
            self._unreleased.append(held)

    def _release_pending(self) -> None:
        """Hand back the jobs :meth:`_release` could not (a job claimed by another worker since,
        its lease run out, is left as it is)."""
        pending, self._unreleased = self._unreleased, []
        for held in pending:
            log.info("worker %s: handing job %d back again", self.id, held.job.id)
            self._release(held)

    def _fail(self, held: _Held, error: str) -> None:
        try:
            with self.db.session() as s:
                spent = store.job_evaluations(s, job_id=held.job.id)
                store.finish_job(
                    s,
                    job_id=held.job.id,
                    worker_id=self.id,
                    status=JobStatus.FAILED,
                    error=error,
                    evaluations=spent,
                )
        except StoreError as exc:
            # The lease runs out and the job is claimed again (up to MAX_ATTEMPTS).
            log.warning("worker %s: cannot mark job %d failed: %s", self.id, held.job.id, exc)
