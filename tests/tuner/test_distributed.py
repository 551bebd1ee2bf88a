"""Distributed mode: worker processes sharing one PostgreSQL database, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.store import JobStatus
from tilewise.types import Shape, Workload

OP = "scale_relu_dropout"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _workers(
    url: str, twin_cache: Path, count: int, journals: Path | None = None
) -> list[subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    env.update(
        TILEWISE_CACHE_DIR=str(twin_cache),
        TILEWISE_REPEATS="3",
        TILEWISE_HEARTBEAT_S="0.5",
        TILEWISE_POLL_S="0.2",
        TILEWISE_DB_URL=url,
    )
    if journals is not None:
        env["TILEWISE_STUDY_JOURNAL_DIR"] = str(journals)
    cmd = [sys.executable, "-m", "tilewise.cli", "worker", "--exit-when-idle"]
    procs = [
        subprocess.Popen(
            [*cmd, "--device", str(i)], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
        for i in range(count)
    ]
    done = []
    try:
        for proc in procs:
            _, stderr = proc.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def _queue(db: store.Store, n: int, budget: int, *, jobs: int = 1) -> list[store.JobRow]:
    spec = get_op(OP)
    workload = Workload(OP, spec.version, "cpu-twin", "float32", Shape({"N": n}))
    with db.session() as s:
        row = store.commit_workload(s, workload)
        return [
            store.create_job(s, workload_id=row.id, budget_evals=budget, force=True)
            for _ in range(jobs)
        ]


def test_two_workers_tune_two_workloads_on_postgres(pg_url: str, twin_cache: Path) -> None:
    db = store.open_store(pg_url)
    try:
        jobs = _queue(db, 3072, 3) + _queue(db, 6144, 3)
        for done in _workers(pg_url, twin_cache, 2):
            assert done.returncode == 0, done.stderr
        with db.session() as s:
            finished = [store.get_job(s, job_id=j.id) for j in jobs]
            tilings = store.best_tilings(s, op=OP)
            records = {j.id: store.records_for(s, workload_id=j.workload_id) for j in jobs}
            spent = {j.id: store.job_evaluations(s, job_id=j.id) for j in jobs}
    finally:
        db.close()
    for job in finished:
        assert job is not None and job.status is JobStatus.SUCCEEDED, job
        assert job.evaluations == spent[job.id] == 3
    assert sorted(w.id for w, _ in tilings) == sorted(j.workload_id for j in jobs)
    for rows in records.values():
        keys = [r.tiling_key for r in rows if r.source != store.SOURCE_REMEASURE]
        assert len(keys) == len(set(keys)), Counter(keys).most_common(3)


@pytest.mark.parametrize("in_journal", [False, True], ids=["study-in-db", "study-in-journal"])
def test_two_workers_on_one_study_never_measure_a_tiling_twice(
    pg_url: str, twin_cache: Path, tmp_path: Path, in_journal: bool
) -> None:
    """Two jobs of one workload (a forced re-tune while one runs) share its study: in the
    database, or in its journal file (TILEWISE_STUDY_JOURNAL_DIR)."""
    journals = tmp_path / "studies" if in_journal else None
    db = store.open_store(pg_url)
    try:
        jobs = _queue(db, 6144, 6, jobs=2)
        for done in _workers(pg_url, twin_cache, 2, journals):
            assert done.returncode == 0, done.stderr
        with db.session() as s:
            finished = [store.get_job(s, job_id=j.id) for j in jobs]
            records = store.records_for(s, workload_id=jobs[0].workload_id)
            spent = [store.job_evaluations(s, job_id=j.id) for j in jobs]
    finally:
        db.close()
    assert all(j is not None and j.status is JobStatus.SUCCEEDED for j in finished), finished
    assert spent == [6, 6]
    keys = [r.tiling_key for r in records if r.source != store.SOURCE_REMEASURE]
    assert len(keys) == len(set(keys)), Counter(keys).most_common(3)
    if journals is not None:
        (journal,) = journals.iterdir()
        trials = optuna.load_study(
            study_name=journal.stem, storage=JournalStorage(JournalFileBackend(str(journal)))
        ).get_trials(deepcopy=False)
        told = {t.number for t in trials if t.state is TrialState.COMPLETE}
        searched = [r for r in records if r.source != store.SOURCE_REMEASURE]
        assert all(r.trial_number in told for r in searched if r.trial_number is not None)
        assert sum(r.trial_number is not None for r in searched) >= 12


def test_api_and_two_worker_processes_on_postgres(pg_url: str, twin_cache: Path) -> None:
    """A build system's view: jobs posted through the API, tuned by two worker processes,
    results read back through the API."""
    from fastapi.testclient import TestClient

    from tilewise.api import create_app
    from tilewise.settings import Settings

    settings = Settings(_env_file=None, db_url=pg_url, api_token="t0ken", dev_mode=False)  # type: ignore[call-arg]
    auth = {"Authorization": "Bearer t0ken"}
    with TestClient(create_app(settings)) as client:
        posted = [
            client.post("/v1/jobs", headers=auth, json={"op": OP, "shape": {"N": n}, "budget": 3})
            for n in (3072, 6144)
        ]
        assert [p.status_code for p in posted] == [202, 202], [p.text for p in posted]
        for done in _workers(pg_url, twin_cache, 2):
            assert done.returncode == 0, done.stderr
        for p in posted:
            job = client.get(f"/v1/jobs/{p.json()['id']}").json()
            assert job["status"] == "succeeded" and job["evaluations"] == 3, job
            shape = p.json()["workload"]["shape"]
            answer = client.get(f"/v1/tilings/{OP}", params={"shape": f"N={shape['N']}"}).json()
            assert answer["source"] == "exact", answer
        # Asking again for a tuned workload answers at once with the stored result.
        again = client.post("/v1/jobs", headers=auth, json={"op": OP, "shape": {"N": 3072}})
        assert again.status_code == 200 and again.json()["status"] == "tuned"
