"""POST/GET /v1/batches: a manifest as one batch of jobs, its budgets, its progress and totals."""

from __future__ import annotations

import json
import threading
from typing import Any

from fastapi.testclient import TestClient

from tests.api._support import AUTH, seed_tuned
from tilewise import store
from tilewise.store import JobStatus, Store

OP = "scale_relu_dropout"


def manifest(*shapes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**top, "workloads": [{"op": OP, "shapes": list(shapes)}]}


def _worker_finishes(db: Store, *, fail: str | None = None, worker: str = "w") -> int:
    """What a worker does with the oldest queued job: claim it, spend one evaluation, finish it
    (failed with ``fail`` as the reason). Returns its id."""
    with store.session_scope(db) as s:
        job = store.claim_job(s, worker_id=worker, lease_seconds=60)
        assert job is not None
        status = JobStatus.FAILED if fail else JobStatus.SUCCEEDED
        store.finish_job(
            s, job_id=job.id, worker_id=worker, status=status, error=fail, evaluations=1
        )
    return job.id


def test_a_batch_queues_one_job_per_workload_heaviest_first(client: TestClient, db: Store) -> None:
    body = manifest({"N": 4096}, {"N": 8192, "weight": 10}, "N=16384", budget=3, name="build 7")
    r = client.post("/v1/batches", json=body, headers=AUTH)
    assert r.status_code == 202, r.text
    batch = r.json()
    assert r.headers["location"] == f"/v1/batches/{batch['id']}"
    assert (batch["name"], batch["status"], batch["done"]) == ("build 7", "queued", False)
    items = batch["workloads"]
    assert [i["workload"]["shape"] for i in items] == [{"N": 4096}, {"N": 8192}, {"N": 16384}]
    assert [i["weight"] for i in items] == [1.0, 10.0, 1.0]
    assert [(i["status"], i["budget"], i["evaluations"]) for i in items] == [("queued", 3, 0)] * 3
    assert batch["totals"] == {
        "workloads": 3, "tuned": 0, "queued": 3, "running": 0, "succeeded": 0, "failed": 0,
        "cancelled": 0, "budget": 9, "evaluations": 0,
    }  # fmt: skip
    # The jobs are real jobs, and workers claim the heaviest first, then in manifest order.
    claimed = []
    with store.session_scope(db) as s:
        while (job := store.claim_job(s, worker_id="w", lease_seconds=60)) is not None:
            claimed.append(job.id)
    assert claimed == [items[1]["job_id"], items[0]["job_id"], items[2]["job_id"]]
    assert client.get(f"/v1/jobs/{items[1]['job_id']}").json()["budget"] == 3
    assert client.get(f"/v1/batches/{batch['id']}").json()["status"] == "running"


def test_total_budget_is_spread_by_weight_over_the_workloads_to_tune(
    client: TestClient, db: Store
) -> None:
    tuned = seed_tuned(db, shape={"N": 2048})
    body = manifest(
        {"N": 2048, "weight": 50}, {"N": 4096, "weight": 3}, {"N": 8192}, total_budget=30
    )
    batch = client.post("/v1/batches", json=body, headers=AUTH).json()
    items = batch["workloads"]
    # The tuned workload is skipped and takes no share: 30 over the other two, 5 each first,
    # then 20 split 3:1.
    assert [(i["status"], i["budget"], i["job_id"] is None) for i in items] == [
        ("tuned", None, True),
        ("queued", 20, False),
        ("queued", 10, False),
    ]
    assert items[0]["latency_us"] == tuned.best_us
    assert items[0]["speedup"] == tuned.default_us / tuned.best_us
    assert batch["totals"]["tuned"] == 1 and batch["totals"]["budget"] == 30
    # force: the tuned one is tuned again, and the total is spread over all three.
    forced = client.post("/v1/batches", json={**body, "force": True}, headers=AUTH).json()
    assert [i["status"] for i in forced["workloads"]] == ["queued"] * 3
    assert sum(i["budget"] for i in forced["workloads"] if i["job_id"] != items[1]["job_id"]) > 0
    assert forced["force"] is True


def test_a_workload_with_an_active_job_joins_that_job(client: TestClient) -> None:
    job = client.post(
        "/v1/jobs", json={"op": OP, "shape": {"N": 4096}, "budget": 7}, headers=AUTH
    ).json()
    batch = client.post("/v1/batches", json=manifest({"N": 4096}, budget=2), headers=AUTH).json()
    (item,) = batch["workloads"]
    assert item["job_id"] == job["id"] and item["budget"] == 7  # the job keeps its budget
    # Two batches sharing a workload share its job.
    again = client.post("/v1/batches", json=manifest({"N": 4096}), headers=AUTH).json()
    assert again["workloads"][0]["job_id"] == job["id"] and again["id"] != batch["id"]


def test_status_and_totals_follow_the_jobs_to_failed_with_the_reason(
    client: TestClient, db: Store
) -> None:
    body = manifest({"N": 4096, "weight": 5}, {"N": 8192, "weight": 2}, {"N": 16384}, budget=1)
    batch = client.post("/v1/batches", json=body, headers=AUTH).json()
    url = f"/v1/batches/{batch['id']}"
    _worker_finishes(db)
    now = client.get(url).json()
    assert (now["status"], now["done"]) == ("running", False)
    assert [i["status"] for i in now["workloads"]] == ["succeeded", "queued", "queued"]
    _worker_finishes(db, fail="no tiling ran successfully in 1 evaluations")
    _worker_finishes(db)
    done = client.get(url).json()
    assert (done["status"], done["done"]) == ("failed", True)
    assert [i["status"] for i in done["workloads"]] == ["succeeded", "failed", "succeeded"]
    assert done["workloads"][1]["error"] == "no tiling ran successfully in 1 evaluations"
    assert done["totals"]["succeeded"] == 2 and done["totals"]["failed"] == 1
    assert done["totals"]["evaluations"] == 3
    listed = client.get("/v1/batches").json()["batches"]
    assert [(b["id"], b["status"]) for b in listed] == [(batch["id"], "failed")]
    assert "workloads" not in listed[0]


def test_all_succeeded_and_a_cancelled_job_fails_the_batch(client: TestClient, db: Store) -> None:
    ok = client.post("/v1/batches", json=manifest({"N": 4096}, budget=1), headers=AUTH).json()
    _worker_finishes(db)
    assert client.get(f"/v1/batches/{ok['id']}").json()["status"] == "succeeded"
    other = client.post("/v1/batches", json=manifest({"N": 512}, budget=1), headers=AUTH).json()
    client.post(f"/v1/jobs/{other['workloads'][0]['job_id']}/cancel", headers=AUTH)
    cancelled = client.get(f"/v1/batches/{other['id']}").json()
    assert (cancelled["status"], cancelled["totals"]["cancelled"]) == ("failed", 1)
    # A batch of tuned workloads only is done at once.
    seed_tuned(db, shape={"N": 1024})
    tuned = client.post("/v1/batches", json=manifest({"N": 1024}), headers=AUTH).json()
    assert (tuned["status"], tuned["done"], tuned["totals"]["tuned"]) == ("succeeded", True, 1)


def test_bad_manifests_are_422_naming_the_place(client: TestClient, db: Store) -> None:
    cases: list[tuple[dict[str, Any], list[Any]]] = [
        (manifest({"N": 4096}, {"N": 0}), ["body", "workloads", 0, "shapes", 1]),
        (manifest({"N": 4096}, {"N": "x"}), ["body", "workloads", 0, "shapes", 1, "N"]),
        (manifest({"N": 4096, "weight": -1}), ["body", "workloads", 0, "shapes", 0, "weight"]),
        (manifest({"dims": "N=5"}), ["body", "workloads", 0, "shapes", 0, "dims"]),
        (manifest({"dims": None}), ["body", "workloads", 0, "shapes", 0, "dims"]),
        ({"workloads": [{"op": "nope", "shapes": [{"N": 1}]}]}, ["body", "workloads", 0, "op"]),
        (manifest({"N": 4096}, dtype="int8"), ["body", "dtype"]),
        (manifest({"N": 1 << 24}, {"N": 1 << 30}), ["body", "workloads", 0, "shapes", 1, "N"]),
        (  # above settings.max_elements
            {
                "workloads": [
                    {"op": "linear_add_gelu", "shapes": [{"M": 1 << 16, "N": 1 << 16, "K": 8}]}
                ]
            },
            ["body", "workloads", 0, "shapes", 0],
        ),
        (manifest({"N": 64}, {"N": 128}, total_budget=1), ["body", "total_budget"]),
        (manifest({"N": 64}, budget=10_000), ["body", "budget"]),  # above settings.max_budget
        (manifest({"N": 64}, budget=1, total_budget=2), ["body"]),
        ({"workloads": []}, ["body", "workloads"]),
        # PostgreSQL's text holds no NUL: it was a 503 "database unavailable" there.
        (manifest({"N": 64}, name="nul \x00 here"), ["body", "name"]),
    ]
    for body, loc in cases:
        r = client.post("/v1/batches", json=body, headers=AUTH)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"][0]["loc"] == loc, (body, r.json())
    # Nothing was written.
    assert client.get("/v1/batches").json()["batches"] == []
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_too_many_workloads_and_too_large_a_body_are_refused(client: TestClient) -> None:
    settings = client.app.state.settings  # type: ignore[attr-defined]
    many = manifest(*({"N": 64 * (i + 1)} for i in range(settings.max_batch_workloads + 1)))
    r = client.post("/v1/batches", json=many, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "workloads"], r.text
    assert "split the manifest" in r.json()["detail"][0]["msg"]
    # A batch may be larger than other bodies (max_body_bytes), up to max_batch_bytes.
    big = json.dumps(manifest(*({"N": 64} for _ in range(8000))))
    assert settings.max_body_bytes < len(big) < settings.max_batch_bytes
    r = client.post(
        "/v1/batches", content=big, headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code == 202, r.text[:300]
    assert len(r.json()["workloads"]) == 1  # one workload, listed 8000 times: weight 8000
    assert r.json()["workloads"][0]["weight"] == 8000
    huge = b'{"workloads": [' + b" " * settings.max_batch_bytes + b"]}"
    r = client.post(
        "/v1/batches", content=huge, headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code == 413


def test_writes_need_the_token_and_unknown_batches_are_404(client: TestClient) -> None:
    assert client.post("/v1/batches", json=manifest({"N": 64})).status_code == 401
    assert client.get("/v1/batches/999").status_code == 404
    assert client.get("/v1/batches/0").status_code == 422


def test_concurrent_batches_sharing_workloads_make_one_job_each(client: TestClient) -> None:
    """Two builds submitting overlapping manifests at once, in opposite orders: no deadlock,
    one job per workload."""
    shapes = [{"N": 256 * (i + 1)} for i in range(6)]
    bodies = [manifest(*shapes, budget=2), manifest(*reversed(shapes), budget=2)] * 3
    answers: list[Any] = [None] * len(bodies)

    def post(i: int) -> None:
        answers[i] = client.post("/v1/batches", json=bodies[i], headers=AUTH)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a.status_code for a in answers] == [202] * len(bodies), [a.text for a in answers]
    jobs = client.get("/v1/jobs").json()["jobs"]
    assert len(jobs) == len(shapes)
    job_of = {j["workload"]["shape"]["N"]: j["id"] for j in jobs}
    for answer in answers:
        for item in answer.json()["workloads"]:
            assert item["job_id"] == job_of[item["workload"]["shape"]["N"]]
