"""POST/GET /v1/jobs: submission policy, duplicates, concurrency, listing, cancelling."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

from tests.api._support import AUTH, seed_tuned
from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.store import Store
from tilewise.types import Shape, Workload

BODY: dict[str, Any] = {"op": "scale_relu_dropout", "shape": {"N": 65536}, "budget": 5}


def test_create_job_is_202_with_the_workload(client: TestClient) -> None:
    r = client.post("/v1/jobs", json=BODY, headers=AUTH)
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "queued" and job["budget"] == 5 and job["evaluations"] == 0
    assert job["workload"]["op"] == "scale_relu_dropout"
    assert job["workload"]["shape"] == {"N": 65536}
    assert (job["workload"]["dtype"], job["workload"]["target"]) == ("float32", "cpu-twin")
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    got = client.get(f"/v1/jobs/{job['id']}")
    assert got.status_code == 200 and got.json() == job


def test_a_key_given_twice_is_refused_and_nothing_is_queued(client: TestClient) -> None:
    """json keeps the last of a key given twice: which budget, which op was meant?"""
    for body in (
        '{"op": "scale_relu_dropout", "shape": {"N": 65536}, "budget": 2, "budget": 4000}',
        '{"op": "linear_add_gelu", "op": "scale_relu_dropout", "shape": {"N": 8}}',
        '{"op": "scale_relu_dropout", "shape": {"N": 8, "N": 16}}',
    ):
        json_header = {**AUTH, "content-type": "application/json"}
        r = client.post("/v1/jobs", content=body, headers=json_header)
        assert r.status_code == 422, r.text
        [detail] = r.json()["detail"]
        assert detail["loc"] == ["body"] and "is given twice in one object" in detail["msg"]
        # Without the token it is the token that is refused, as for any body.
        anonymous = client.post(
            "/v1/jobs", content=body, headers={"content-type": "application/json"}
        )
        assert anonymous.status_code == 401
    assert client.get("/v1/jobs").json()["total"] == 0
    batch = '{"workloads": [{"op": "swiglu", "shapes": ["T=5,I=55"]}], "budget": 2, "budget": 9}'
    r = client.post("/v1/batches", content=batch, headers=json_header)
    assert r.status_code == 422 and "'budget' is given twice" in r.text
    assert client.get("/v1/jobs").json()["total"] == 0


def test_default_budget_comes_from_settings(client: TestClient) -> None:
    body = {k: v for k, v in BODY.items() if k != "budget"}
    r = client.post("/v1/jobs", json=body, headers=AUTH)
    assert r.status_code == 202
    assert r.json()["budget"] == client.app.state.settings.default_budget  # type: ignore[attr-defined]


def test_same_workload_while_queued_or_running_returns_that_job(
    client: TestClient, db: Store
) -> None:
    first = client.post("/v1/jobs", json=BODY, headers=AUTH).json()
    again = client.post("/v1/jobs", json={**BODY, "budget": 9}, headers=AUTH)
    assert again.status_code == 202 and again.json()["id"] == first["id"]
    with store.session_scope(db) as session:
        claimed = store.claim_job(session, worker_id="w", lease_seconds=60)
    assert claimed is not None and claimed.id == first["id"]
    running = client.post("/v1/jobs", json={**BODY, "force": True}, headers=AUTH).json()
    assert running["id"] == first["id"] and running["status"] == "running"
    # Another target (same op and shape) is another workload: a job of its own.
    other = client.post("/v1/jobs", json={**BODY, "target": "ascend910b3"}, headers=AUTH)
    assert other.status_code == 202 and other.json()["id"] != first["id"]
    assert other.json()["workload"]["target"] == "ascend910b3"


def test_concurrent_submissions_create_one_job_per_workload(client: TestClient, db: Store) -> None:
    shapes = [{"N": 4096}, {"N": 8192}, {"N": 16384}]
    # Known workloads (an insert of a new one would serialize the racers by itself).
    spec = get_op("scale_relu_dropout")
    with store.session_scope(db) as session:
        for shape in shapes:
            store.commit_workload(
                session, Workload(spec.name, spec.version, "cpu-twin", "float32", Shape(shape))
            )
    n_threads = 24
    barrier = threading.Barrier(n_threads)
    results: list[tuple[int, dict[str, Any]]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        try:
            barrier.wait()
            r = client.post("/v1/jobs", json={**BODY, "shape": shapes[i % 3]}, headers=AUTH)
            with lock:
                results.append((r.status_code, r.json()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {code for code, _ in results} == {202}
    by_shape: dict[int, set[int]] = {}
    for _, job in results:
        by_shape.setdefault(job["workload"]["shape"]["N"], set()).add(job["id"])
    assert sorted(by_shape) == [4096, 8192, 16384]
    assert all(len(ids) == 1 for ids in by_shape.values()), by_shape
    listed = client.get("/v1/jobs").json()["jobs"]
    assert len(listed) == 3


def test_tuned_workload_returns_the_stored_result(client: TestClient, db: Store) -> None:
    seeded = seed_tuned(db)
    r = client.post("/v1/jobs", json=BODY, headers=AUTH)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["status"] == "tuned"
    assert result["tiling"] == dict(seeded.best)
    assert result["latency_us"] == seeded.best_us
    assert result["speedup"] == seeded.default_us / seeded.best_us
    assert result["workload"]["key"] == seeded.workload.key
    assert client.get("/v1/jobs").json()["jobs"] == []  # no job was queued


def test_force_queues_a_new_job_for_a_tuned_workload(client: TestClient, db: Store) -> None:
    seed_tuned(db)
    r = client.post("/v1/jobs", json={**BODY, "force": True}, headers=AUTH)
    assert r.status_code == 202 and r.json()["force"] is True
    again = client.post("/v1/jobs", json={**BODY, "force": True}, headers=AUTH)
    assert again.json()["id"] == r.json()["id"]  # forced, but still no duplicate
    # Unforced, the stored result still answers while the re-tune runs.
    assert client.post("/v1/jobs", json=BODY, headers=AUTH).status_code == 200


def test_get_job_reports_progress_best_and_error(client: TestClient, db: Store) -> None:
    job_id = client.post("/v1/jobs", json=BODY, headers=AUTH).json()["id"]
    with store.session_scope(db) as session:
        store.claim_job(session, worker_id="w1", lease_seconds=60)
        store.update_job_progress(
            session, job_id=job_id, worker_id="w1", evaluations=2, best_latency_us=12.5, speedup=1.3
        )
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "running" and job["worker_id"] == "w1"
    assert (job["evaluations"], job["budget"], job["progress"]) == (2, 5, 0.4)
    assert (job["best_latency_us"], job["speedup"]) == (12.5, 1.3)
    with store.session_scope(db) as session:
        store.finish_job(session, job_id=job_id, worker_id="w1", status="failed", error="boom")
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed" and job["error"] == "boom" and job["finished_at"]
    # A failed job is not active: asking again queues a new one.
    assert client.post("/v1/jobs", json=BODY, headers=AUTH).json()["id"] != job_id


def test_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/v1/jobs/999999").status_code == 404
    assert client.post("/v1/jobs/999999/cancel", headers=AUTH).status_code == 404


def test_list_filters_by_status_and_op(client: TestClient) -> None:
    a = client.post("/v1/jobs", json=BODY, headers=AUTH).json()
    b = client.post(
        "/v1/jobs",
        json={"op": "linear_add_gelu", "shape": {"M": 64, "N": 64, "K": 64}, "budget": 3},
        headers=AUTH,
    ).json()
    client.post(f"/v1/jobs/{a['id']}/cancel", headers=AUTH)
    ids = [j["id"] for j in client.get("/v1/jobs").json()["jobs"]]
    assert ids == [b["id"], a["id"]]  # newest first
    assert [j["id"] for j in client.get("/v1/jobs?status=queued").json()["jobs"]] == [b["id"]]
    assert [j["id"] for j in client.get("/v1/jobs?status=cancelled").json()["jobs"]] == [a["id"]]
    assert [j["id"] for j in client.get("/v1/jobs?op=linear_add_gelu").json()["jobs"]] == [b["id"]]
    # limit cuts the list, total says how many matched.
    cut = client.get("/v1/jobs?limit=1").json()
    assert ([j["id"] for j in cut["jobs"]], cut["total"]) == ([b["id"]], 2)
    assert client.get("/v1/jobs?status=queued&limit=1").json()["total"] == 1
    bad = client.get("/v1/jobs?status=paused")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "status"]
    bad = client.get("/v1/jobs?op=nope")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "op"]


def test_cancel_queued_job_then_cancel_again_is_unchanged(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=BODY, headers=AUTH).json()["id"]
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH)
    assert again.status_code == 200 and again.json() == r.json()
    # Cancelled is not active: a new submission queues a new job.
    assert client.post("/v1/jobs", json=BODY, headers=AUTH).json()["id"] != job_id
