"""`tilewise tune-set` (a manifest tuned here) and `tilewise submit` (sent to a service as one
batch): budgets, skipping tuned workloads, exit codes, a failed workload that leaves the others
done, and the table written at the end."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api._support import TOKEN, live_server, make_settings
from tests.reliability._procs import cli, free_port, running, service_env, wait_for
from tilewise import store

ROOT = Path(__file__).resolve().parents[2]
OP = "scale_relu_dropout"


def run(
    *args: str, cache: Path, extra: dict[str, str] | None = None, **settings: object
) -> subprocess.CompletedProcess[str]:
    """A `tilewise` command with ``settings`` as TILEWISE_<NAME> and ``extra`` variables."""
    env = service_env(cache, REPEATS=3, **settings)
    env.update(COLUMNS="200", HOME=str(cache.parent), XDG_DATA_HOME=str(cache.parent / "data"))
    env.update(extra or {})
    return subprocess.run(
        cli(*args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def fake_cann_9(root: Path) -> Path:
    """A CANN 9.x layout (bisheng, no ascendc.cmake): the Ascend backend refuses it on any
    host, with or without a real toolkit in the default places."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "bisheng").write_text("")
    return root


# ---------------------------------------------------------------------------------------------
# tune-set


def test_a_bad_manifest_exits_2_naming_the_place_and_writes_nothing(tmp_path: Path) -> None:
    path = write(
        tmp_path / "m.json",
        {"workloads": [{"op": OP, "shapes": [{"N": 64}, {"N": 64, "M": 2}]}]},
    )
    db = tmp_path / "never.db"
    for command in (["tune-set", str(path), "--db", f"sqlite:///{db}"],
                    ["submit", str(path), "--url", "http://127.0.0.1:9"]):  # fmt: skip
        done = run(*command, cache=tmp_path / "cache")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0] == (
            f"error: {path}: workloads[0].shapes[1]: scale_relu_dropout: unknown dim M; dims are N"
        )
    assert not db.exists()


def test_plan_spreads_a_total_budget_by_weight_and_skips_tuned(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'tilewise.db'}"
    db = store.open_store(url)
    try:
        from tests.api._support import seed_tuned

        seed_tuned(db, shape={"N": 2048})
    finally:
        db.close()
    path = write(
        tmp_path / "m.json",
        {"total_budget": 40, "workloads": [{"op": OP, "shapes": [
            {"N": 2048, "weight": 100}, {"N": 4096, "weight": 3}, {"N": 8192}]}]},
    )  # fmt: skip
    done = run("tune-set", str(path), "--plan", "--json", "--db", url, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["workloads"]
    assert [(r["shape"], r["status"], r["budget"]) for r in rows] == [
        ("N=2048", "tuned", None),  # tuned already: no share of the total
        ("N=4096", "queued", 5 + 23),  # 5 each first, then the remaining 30 split 3:1
        ("N=8192", "queued", 5 + 7),
    ]
    forced = run("tune-set", str(path), "--plan", "--json", "--force", "--db", url,
                 cache=tmp_path / "cache")  # fmt: skip
    assert [r["status"] for r in json.loads(forced.stdout)["workloads"]] == ["queued"] * 3
    table = run("tune-set", str(path), "--plan", "--db", url, cache=tmp_path / "cache")
    assert "N=4096" in table.stdout and "28" in table.stdout, table.stdout

    # A plan writes nothing: on a database file not made yet, all are to tune, and no file is.
    fresh = tmp_path / "none" / "tilewise.db"
    planned = run("tune-set", str(path), "--plan", "--json", "--db", f"sqlite:///{fresh}",
                  cache=tmp_path / "cache")  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert [r["status"] for r in json.loads(planned.stdout)["workloads"]] == ["queued"] * 3
    assert not fresh.parent.exists()

    # A total the per-workload cap cannot spend is planned as far as it can, and said so.
    capped = write(tmp_path / "big.json", {"total_budget": 9_000_000, "workloads": [
        {"op": OP, "shapes": [{"N": 4096}, {"N": 8192}]}]})  # fmt: skip
    big = run("tune-set", str(capped), "--plan", "--json", "--db", url, cache=tmp_path / "cache")
    assert [r["budget"] for r in json.loads(big.stdout)["workloads"]] == [5000, 5000]
    assert "of total_budget 9000000, 10000 evaluations are planned" in big.stderr


@pytest.mark.slow
def test_tune_set_tunes_on_the_twin_and_a_failed_workload_fails_the_exit_code(
    tmp_path: Path, twin_cache: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'tilewise.db'}"
    path = write(
        tmp_path / "m.json",
        {
            "name": "tiny",
            "budget": 2,
            "workloads": [
                {"op": OP, "shapes": [{"N": 2048}, {"N": 4096, "weight": 5}]},
                {"op": "swiglu", "target": "ascend910b1", "shapes": [{"T": 1, "I": 64}]},
            ],
        },
    )
    cann = {"ASCEND_HOME_PATH": str(fake_cann_9(tmp_path / "cann"))}
    done = run("tune-set", str(path), "--json", "--db", url, cache=twin_cache, extra=cann)
    assert done.returncode == 1, done.stderr
    rows = {r["shape"]: r for r in json.loads(done.stdout)["workloads"]}
    for shape in ("N=2048", "N=4096"):
        row = rows[shape]
        assert row["status"] == "succeeded" and row["evaluations"] == 2, row
        assert row["latency_us"] > 0 and row["speedup"] is not None, row
    failed = rows["I=64,T=1"]
    assert failed["status"] == "failed" and "CANN 9.x layout not supported" in failed["error"]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "workloads[1].shapes[0] swiglu I=64,T=1" in errors[0], errors
    db = store.open_store(url, create=False)
    try:
        with db.session() as s:
            assert len(store.best_tilings(s, op=OP)) == 2
    finally:
        db.close()

    # Again, without the failing workload: both are tuned already, nothing is measured.
    path = write(tmp_path / "m2.json", {"workloads": [{"op": OP, "shapes": ["N=2048", "N=4096"]}]})
    again = run("tune-set", str(path), "--json", "--db", url, cache=twin_cache, extra=cann)
    assert again.returncode == 0, again.stderr
    assert [(r["status"], r["evaluations"]) for r in json.loads(again.stdout)["workloads"]] == [
        ("tuned", 0),
        ("tuned", 0),
    ]


# ---------------------------------------------------------------------------------------------
# submit


def test_submit_without_wait_prints_the_batch_and_refusals_exit_2(
    tmp_path: Path, db_url: str
) -> None:
    path = write(tmp_path / "m.json", {"budget": 3, "workloads": [{"op": OP, "shapes": ["N=64"]}]})
    too_much = write(tmp_path / "big.json", {"budget": 999_999, "workloads": [
        {"op": OP, "shapes": ["N=64"]}]})  # fmt: skip
    cache = tmp_path / "cache"
    with live_server(make_settings(db_url)) as base:
        done = run("submit", str(path), "--url", base, "--json", cache=cache, API_TOKEN=TOKEN)
        assert done.returncode == 0, done.stderr
        batch = json.loads(done.stdout)
        assert batch["status"] == "queued" and batch["workloads"][0]["budget"] == 3
        assert f"batch {batch['id']} on {base}: 1 workloads, 0 tuned already" in done.stderr
        assert httpx.get(f"{base}/v1/batches/{batch['id']}").json()["id"] == batch["id"]

        no_token = run("submit", str(path), "--url", base, cache=cache)
        assert no_token.returncode == 2
        assert "answered 401: missing or invalid bearer token" in no_token.stderr
        refused = run("submit", str(too_much), "--url", base, "--token", TOKEN, cache=cache)
        assert refused.returncode == 2
        assert "answered 422: budget: budget must be between 1 and 5000" in refused.stderr
    gone = run("submit", str(path), "--url", base, cache=cache)
    assert gone.returncode == 2 and "does not answer" in gone.stderr
    bad = run("submit", str(path), "--url", base, "--export", "header", cache=cache)
    assert bad.returncode == 2 and "--export header needs -o FILE" in bad.stderr


def test_ctrl_c_while_submit_waits_says_the_batch_goes_on(tmp_path: Path, db_url: str) -> None:
    """No worker takes the batch: Ctrl-C ends the wait, not the batch, and says where it is."""
    path = write(tmp_path / "m.json", {"budget": 3, "workloads": [{"op": OP, "shapes": ["N=64"]}]})
    cache = tmp_path / "cache"
    env = service_env(cache, API_TOKEN=TOKEN)
    env.update(COLUMNS="200", HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    with live_server(make_settings(db_url)) as base:
        proc = subprocess.Popen(
            cli("submit", str(path), "--url", base, "--wait", "--poll", "0.2"),
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: bool(httpx.get(f"{base}/v1/batches").json()["batches"]), 60, "a batch")
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
        (batch,) = httpx.get(f"{base}/v1/batches").json()["batches"]
    assert proc.returncode == 130, stderr
    assert batch["status"] == "queued"
    assert f"stopped following batch {batch['id']}: it goes on on the service" in stderr
    assert f"{base}/v1/batches/{batch['id']}" in stderr and "Traceback" not in stderr


def test_a_cancelled_workload_is_one_error_line_without_a_repeated_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tilewise.cli._common import report_failures

    row = {"where": "workloads[0].shapes[0]", "op": OP, "shape": "N=64", "dtype": "float32",
           "target": "cpu-twin"}  # fmt: skip
    failed = [{**row, "status": "cancelled", "error": None}, {**row, "status": "failed",
              "error": "no tiling ran"}]  # fmt: skip
    assert report_failures(failed) == 2
    lines = capsys.readouterr().err.splitlines()
    where = "error: workloads[0].shapes[0] scale_relu_dropout N=64 float32 cpu-twin"
    assert lines == [f"{where}: cancelled", f"{where}: failed: no tiling ran"]


@pytest.mark.slow
def test_submit_wait_follows_the_batch_and_writes_the_header_despite_a_failure(
    tmp_path: Path, twin_cache: Path, db_url: str
) -> None:
    """`tilewise serve` (API) and a worker host that takes tensors of at most 100,000
    elements: the batch's large shape fails there with its reason, the others are tuned, the
    exit code is 1 and the header holds the tuned ones."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store.open_store(db_url).close()
    path = write(
        tmp_path / "m.json",
        {"name": "build", "budget": 2, "workloads": [
            {"op": OP, "shapes": [{"N": 4096, "weight": 4}, {"N": 1 << 20, "weight": 2},
                                  {"N": 2048}]}]},
    )  # fmt: skip
    header = tmp_path / "out" / "tilings.h"
    header.parent.mkdir()
    env = service_env(twin_cache, REPEATS=3, POLL_S=0.2, HEARTBEAT_S=0.5)
    serve = cli("serve", "--port", str(port), "--workers", "0", "--db", db_url)
    worker = cli("worker", "--db", db_url)
    small = {**env, "TILEWISE_MAX_ELEMENTS": "100000"}
    with (
        running(serve, env=env, log=tmp_path / "serve.log") as api,
        running(worker, env=small, log=tmp_path / "worker.log"),
    ):

        def up() -> bool:
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 60, f"the API to answer\n{api.log()}")
        done = subprocess.run(
            cli("submit", str(path), "--url", base, "--wait", "--poll", "0.3",
                "--export", "header", "-o", str(header)),
            env={**env, "COLUMNS": "200"}, cwd=ROOT, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        batch = httpx.get(f"{base}/v1/batches/1").json()
        # Again, the table to stdout: the results go to stderr, stdout holds the JSON alone.
        to_stdout = subprocess.run(
            cli("submit", str(path), "--url", base, "--wait", "--poll", "0.3",
                "--export", "json", "-o", "-"),
            env={**env, "COLUMNS": "200"}, cwd=ROOT, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
    assert to_stdout.returncode == 1, to_stdout.stderr
    assert json.loads(to_stdout.stdout)["entries"], to_stdout.stdout[:300]
    assert "batch 2 (build)" in to_stdout.stderr and "wrote the json table" in to_stdout.stderr
    assert not (ROOT / "-").exists()
    assert done.returncode == 1, done.stdout + done.stderr
    assert batch["done"] and batch["status"] == "failed", batch
    status = {i["workload"]["shape"]["N"]: i for i in batch["workloads"]}
    assert status[4096]["status"] == status[2048]["status"] == "succeeded"
    assert status[4096]["evaluations"] == 2 and status[4096]["latency_us"] > 0
    assert status[1 << 20]["status"] == "failed"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("error: workloads[0].shapes[1] scale_relu_dropout N=1048576")
    assert "above the limit 100000" in errors[0]
    assert "batch 1 (build): failed" in done.stdout and "succeeded" in done.stdout
    text = header.read_text()
    assert "Tiling table of scale_relu_dropout" in text and "2 entries" in text, text[:600]
    assert f"wrote the header table of {OP} to {header}" in done.stderr
    assert not [p for p in header.parent.iterdir() if p.name != header.name]  # no temp file


@pytest.mark.slow
def test_ctrl_c_stops_tune_set_after_the_evaluation_in_flight(
    tmp_path: Path, twin_cache: Path
) -> None:
    """The first Ctrl-C: the workload being tuned stops after its evaluation in flight (its
    records kept, no winner stored), the next ones are not started, the summary says so."""
    db = tmp_path / "tw.db"
    path = write(tmp_path / "m.json", {"budget": 500, "workloads": [
        {"op": OP, "shapes": [{"N": 4096, "weight": 2}, {"N": 8192}]}]})  # fmt: skip

    def records() -> int:
        if not db.exists():
            return 0
        with sqlite3.connect(db) as conn:
            try:
                return int(conn.execute("SELECT count(*) FROM tw_records").fetchone()[0])
            except sqlite3.OperationalError:
                return 0

    env = service_env(twin_cache, REPEATS=3)
    env.update(COLUMNS="200")
    proc = subprocess.Popen(
        cli("tune-set", str(path), "--json", "--db", f"sqlite:///{db}"),
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: records() >= 2, 120, "two records of the first workload")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "stopping after the evaluation in flight" in stderr and "Traceback" not in stderr
    rows = {r["shape"]: r for r in json.loads(stdout)["workloads"]}
    assert rows["N=4096"]["status"] == "stopped" and rows["N=4096"]["evaluations"] >= 2
    assert "kept" in rows["N=4096"]["error"]
    assert rows["N=8192"]["status"] == "queued" and rows["N=8192"]["evaluations"] == 0
    assert "interrupted: 2 workload(s) not tuned" in stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM tw_tilings").fetchone()[0] == 0
