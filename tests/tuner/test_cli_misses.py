"""`tilewise misses`: the shapes a service answered without an exact entry, from its database or
over REST, as a table, JSON, or a manifest that `tune-set` and `submit` take as it is."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import httpx

from tests.api._support import TOKEN, live_server, make_settings, seed_tuned
from tests.reliability._procs import cli
from tilewise import store
from tilewise.manifest import load_manifest
from tilewise.store import MissRow
from tilewise.types import Shape

OP = "scale_relu_dropout"
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    env.update(TILEWISE_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200",
               TILEWISE_API_TOKEN=TOKEN)  # fmt: skip
    return subprocess.run(
        cli(*args), env=env, capture_output=True, text=True, timeout=120, check=False
    )


def seeded(url: str) -> None:
    db = store.open_store(url)
    try:
        rows = [
            MissRow(OP, "cpu-twin", "float32", Shape({"N": n}), count, source, T0, T0)
            for n, count, source in (
                (60000, 9, "nearest"),
                (100, 2, "default"),
                (65536, 4, "nearest"),
            )
        ]
        rows.append(MissRow(OP, "cpu-twin", "float16", Shape({"N": 64}), 1, "default", T0, T0))
        with db.session() as s:
            store.record_misses(s, misses=rows, max_rows=100)
        seed_tuned(db, shape={"N": 65536})  # tuned since it was asked
    finally:
        db.close()


def test_misses_from_the_database_as_a_table_json_and_a_manifest(
    tmp_path: Path, db_url: str
) -> None:
    seeded(db_url)
    table = run("misses", "--db", db_url, tmp_path=tmp_path)
    assert table.returncode == 0, table.stderr
    lines = [line.split() for line in table.stdout.splitlines() if OP in line]
    assert [(cells[2], cells[3], cells[4], cells[5]) for cells in lines] == [
        ("float32", "N=60000", "9", "nearest"),
        ("float32", "N=100", "2", "default"),
        ("float16", "N=64", "1", "default"),
    ]  # the tuned one left out
    assert "2030-01-01 12:00:00" in table.stdout

    listed = json.loads(run("misses", "--db", db_url, "--format", "json", "--include-tuned",
                            tmp_path=tmp_path).stdout)["misses"]  # fmt: skip
    assert [(m["shape"]["N"], m["count"], m["tuned"]) for m in listed] == [
        (60000, 9, False), (65536, 4, True), (100, 2, False), (64, 1, False),
    ]  # fmt: skip

    # A total below the shapes to tune is refused here, not by tune-set after the file is out.
    short = run("misses", "--db", db_url, "--format", "manifest", "--total-budget", "2",
                "-o", str(tmp_path / "short.yaml"), tmp_path=tmp_path)  # fmt: skip
    assert short.returncode == 2 and "total budget 2 is below the 3 shapes" in short.stderr
    assert not (tmp_path / "short.yaml").exists()

    path = tmp_path / "misses.yaml"
    wrote = run("misses", "--db", db_url, "--format", "manifest", "--min-count", "2",
                "--total-budget", "12", "-o", str(path), tmp_path=tmp_path)  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    assert f"wrote a manifest of 2 shapes to {path}" in wrote.stderr
    manifest = load_manifest(path)
    assert manifest.total_budget == 12
    assert [(dict(e.workload.shape), e.weight) for e in manifest.entries()] == [
        ({"N": 60000}, 9.0),
        ({"N": 100}, 2.0),
    ]
    # The build system's next step takes it as it is.
    plan = run("tune-set", str(path), "--plan", "--json", "--db", db_url, tmp_path=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert [r["budget"] for r in json.loads(plan.stdout)["workloads"]] == [7, 5]

    as_json = tmp_path / "misses.json"
    run("misses", "--db", db_url, "--format", "manifest", "--dtype", "float16",
        "-o", str(as_json), tmp_path=tmp_path)  # fmt: skip
    assert json.loads(as_json.read_text())["workloads"] == [{"op": OP, "shapes": [{"N": 64}]}]
    assert json.loads(as_json.read_text())["dtype"] == "float16"


def test_nothing_to_list_exits_1_and_bad_input_2(tmp_path: Path, db_url: str) -> None:
    seeded(db_url)
    none = run("misses", "--db", db_url, "--op", "swiglu", "--format", "manifest",
               "-o", str(tmp_path / "m.yaml"), tmp_path=tmp_path)  # fmt: skip
    assert none.returncode == 1 and "no untuned shape was asked" in none.stderr
    assert not (tmp_path / "m.yaml").exists()
    empty = run("misses", "--db", db_url, "--op", "swiglu", "--format", "json", tmp_path=tmp_path)
    assert empty.returncode == 1 and json.loads(empty.stdout) == {"misses": []}
    for args, message in (
        (["--budget", "3"], "--budget and --total-budget are a manifest's"),
        (["--format", "json", "--total-budget", "9"], "give --format manifest"),
        (["--op", "nope"], "unknown op 'nope'"),
        (["--target", "gpu"], "unknown target 'gpu'"),
        (["--format", "yaml"], "unknown --format 'yaml'"),
        (["-o", str(tmp_path / "x.yaml")], "give --format manifest"),
        (["--url", "http://127.0.0.1:9"], "--url or --db, not both"),
    ):
        done = run("misses", "--db", db_url, *args, tmp_path=tmp_path)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
    missing = run("misses", "--db", f"sqlite:///{tmp_path / 'none.db'}", tmp_path=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "none.db").exists()


def test_from_a_live_service_to_a_batch(tmp_path: Path, db_url: str) -> None:
    """The loop of the issue: shapes met at run time -> a manifest -> a batch that tunes them."""
    with live_server(make_settings(db_url, misses_flush_s=3600)) as base:
        for n, times in ((4096, 3), (8192, 1)):
            for _ in range(times):
                r = httpx.get(f"{base}/v1/tilings/{OP}", params={"shape": f"N={n}"})
                assert r.json()["source"] == "default"
        path = tmp_path / "seen.yaml"
        done = run("misses", "--url", base, "--format", "manifest", "--budget", "3",
                   "-o", str(path), tmp_path=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "- {N: 4096, weight: 3}" in path.read_text()
        sent = run("submit", str(path), "--url", base, "--json", tmp_path=tmp_path)
        assert sent.returncode == 0, sent.stderr
        batch = json.loads(sent.stdout)
        assert [(i["workload"]["shape"], i["weight"], i["budget"]) for i in batch["workloads"]] == [
            ({"N": 4096}, 3.0, 3),
            ({"N": 8192}, 1.0, 3),
        ]
