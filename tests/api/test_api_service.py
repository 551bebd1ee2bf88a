"""Targets, workers, health, metrics, the OpenAPI page, and what happens without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import sessionmaker

from tests.api._support import AUTH, make_settings, seed_tuned
from tilewise import store
from tilewise.api import create_app
from tilewise.errors import SchemaError
from tilewise.kernels.targets import list_targets
from tilewise.store import Store, create_engine, migrate


def test_targets(read_client: TestClient) -> None:
    targets = read_client.get("/v1/targets").json()
    assert [t["name"] for t in targets] == [t.name for t in list_targets()]
    b1 = next(t for t in targets if t["name"] == "ascend910b1")
    assert (b1["cube_cores"], b1["vector_cores"], b1["ub"]) == (24, 48, 192 * 1024)


def test_one_garbled_platform_ini_leaves_the_other_targets_and_the_dashboard(
    read_client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = tmp_path / "x86_64-linux" / "data" / "platform_config"
    platform.mkdir(parents=True)
    (platform / "Ascend910B1.ini").write_text("[SoCInfo]\nai_core_cnt=24\n")  # a stub
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    targets = {t["name"]: t for t in read_client.get("/v1/targets").json()}
    assert targets["ascend910b1"]["source"].startswith("built-in, the toolkit's: platform file")
    assert "lacks or garbles 'AICoreSpec'" in targets["ascend910b1"]["source"]
    assert targets["ascend910b2"]["source"] == "built-in"
    for page in ("/", "/?target=cpu-twin", "/ops/swiglu"):
        assert read_client.get(page).status_code == 200, page


def test_workers(client: TestClient, db: Store) -> None:
    assert client.get("/v1/workers").json() == []
    with store.session_scope(db) as session:
        store.heartbeat_worker(
            session, worker_id="h:1:cpu-twin:-", host="h", pid=1, target="cpu-twin"
        )
        store.heartbeat_worker(
            session,
            worker_id="h:2:cpu-twin:-",
            host="h",
            pid=2,
            target="cpu-twin",
            now=datetime(2000, 1, 1, tzinfo=UTC),
        )
    workers = client.get("/v1/workers").json()
    assert [w["id"] for w in workers] == ["h:1:cpu-twin:-", "h:2:cpu-twin:-"]
    assert workers[0]["status"] == "idle" and workers[0]["pid"] == 1
    # The second stopped hearing from in 2000, killed without its stop: its status stays.
    assert [(w["status"], w["alive"]) for w in workers] == [("idle", True), ("idle", False)]
    alive = client.get("/v1/workers?alive_within=60").json()
    assert [w["id"] for w in alive] == ["h:1:cpu-twin:-"]
    page = client.get("/").text
    assert "lost (was idle; no heartbeat for a lease)" in page
    assert page.count("lost (was") == 1


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "database": client.app.state.store.engine.dialect.name,  # type: ignore[attr-defined]
        "revision": store.head_revision(),
    }
    # Load balancers probe with HEAD: the same answer, without its body.
    head = client.head("/healthz")
    assert head.status_code == 200 and head.headers["content-type"] == "application/json"


def test_openapi_and_docs(read_client: TestClient) -> None:
    spec = read_client.get("/openapi.json").json()
    paths = set(spec["paths"])
    for path in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/cancel",
        "/v1/ops",
        "/v1/ops/{op}",
        "/v1/ops/{op}/analysis",
        "/v1/tilings/{op}",
        "/v1/tables",
        "/v1/tables/{op}",
        "/v1/targets",
        "/v1/workers",
        "/healthz",
        "/metrics",
    ):
        assert path in paths, path
    assert "/" not in paths  # the dashboard is not API
    assert set(spec["paths"]["/v1/jobs"]["post"]["responses"]) >= {"200", "202", "422"}
    assert read_client.get("/docs").status_code == 200


def test_metrics(client: TestClient, db: Store) -> None:
    seed_tuned(db)
    client.post("/v1/jobs", json={"op": "scale_relu_dropout", "shape": {"N": 64}}, headers=AUTH)
    client.get("/v1/ops")
    client.get("/v1/ops/nope")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert "tilewise_database_up 1.0" in text
    assert 'tilewise_jobs{status="queued"} 1.0' in text
    assert 'tilewise_jobs{status="running"} 0.0' in text
    assert "tilewise_workloads 2.0" in text
    assert "tilewise_workloads_tuned 1.0" in text
    assert 'tilewise_http_requests_total{method="GET",route="/v1/ops",status="200"} 1.0' in text
    assert 'route="/v1/ops/{op}",status="404"' in text  # templates, not raw paths
    assert (
        'tilewise_http_request_duration_seconds_count{method="POST",route="/v1/jobs"} 1.0' in text
    )


def _take_database_away(client: TestClient) -> Store:
    engine = create_engine("postgresql+psycopg://tilewise@127.0.0.1:1/none")
    away = Store(engine=engine, sessions=sessionmaker(engine))
    state = client.app.state  # type: ignore[attr-defined]
    state.store = state.lookup.store = away
    state.lookup.check_s = 0.0
    state.metrics.bind(away)
    return away


def test_database_away_is_503(client: TestClient) -> None:
    engine = _take_database_away(client).engine
    try:
        for method, path in [
            ("GET", "/v1/jobs"),
            ("GET", "/v1/jobs/1"),
            ("GET", "/v1/workers"),
            ("GET", "/v1/tilings/scale_relu_dropout?shape=N=64"),
            ("GET", "/v1/tables"),
            ("GET", "/healthz"),
            ("GET", "/"),
        ]:
            r = client.request(method, path)
            assert r.status_code == 503, (path, r.text)
            assert "database unavailable" in r.json()["detail"]
        r = client.post(
            "/v1/jobs", json={"op": "scale_relu_dropout", "shape": {"N": 64}}, headers=AUTH
        )
        assert r.status_code == 503 and r.headers["retry-after"]
        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and "tilewise_database_up 0.0" in metrics.text
        # Reads that need no database still work.
        assert client.get("/v1/ops").status_code == 200
    finally:
        engine.dispose()


def test_lookup_serves_the_table_in_memory_while_the_database_is_away(
    client: TestClient, db: Store
) -> None:
    seed_tuned(db)
    url = "/v1/tilings/scale_relu_dropout?shape=N=65536"
    assert client.get(url).json()["source"] == "exact"
    away = _take_database_away(client)
    try:
        r = client.get(url)
        assert r.status_code == 200 and r.json()["source"] == "exact"
        assert client.get("/v1/jobs").status_code == 503
    finally:
        away.close()


def test_old_schema_refuses_to_start_with_the_command(db_url: str) -> None:
    migrate(db_url, revision="0001")
    app = create_app(make_settings(db_url))
    with pytest.raises(SchemaError, match="tilewise db upgrade --db"), TestClient(app):
        pass


def test_tuning_metrics(client: TestClient, db: Store) -> None:
    """Evaluations by outcome, time per evaluation and queue depth by target, from the
    database the workers write."""
    seeded = seed_tuned(db)  # 6 ok and 1 build_failed search records, 1 re-measure
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with store.session_scope(db) as session:
        job = store.create_job(session, workload_id=seeded.workload.id, budget_evals=10)
        claimed = store.claim_job(session, worker_id="w", lease_seconds=60, now=start)
        assert claimed is not None and claimed.id == job.id
        store.finish_job(
            session,
            job_id=job.id,
            worker_id="w",
            status="succeeded",
            evaluations=8,
            now=start + timedelta(seconds=30),
        )
    for target in ("cpu-twin", "ascend910b1", "ascend910b1"):
        body = {"op": "swiglu", "shape": "T=4,I=4096", "target": target}
        r = client.post("/v1/jobs", json=body, headers=AUTH)
        assert r.status_code == 202, r.text
    text = client.get("/metrics").text
    assert 'tilewise_evaluations_total{status="ok"} 6.0' in text
    assert 'tilewise_evaluations_total{status="build_failed"} 1.0' in text
    assert 'tilewise_evaluations_total{status="infeasible"} 0.0' in text  # every status
    assert 'tilewise_evaluation_seconds_sum{target="cpu-twin"} 30.0' in text
    assert 'tilewise_evaluation_seconds_count{target="cpu-twin"} 8.0' in text
    assert 'tilewise_queued_jobs{target="cpu-twin"} 1.0' in text
    # the two ascend910b1 posts are one workload: one job
    assert 'tilewise_queued_jobs{target="ascend910b1"} 1.0' in text
    assert 'tilewise_queued_jobs{target="ascend310p3"} 0.0' in text  # every target
