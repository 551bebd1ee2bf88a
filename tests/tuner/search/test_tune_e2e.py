"""A real tune on the cpu-twin: compile, reject, launch, check, measure, store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilewise import store
from tilewise.types import Tiling


@pytest.mark.slow
def test_tune_small_linear_add_gelu_end_to_end(tmp_path: Path, db_url: str) -> None:
    env = dict(os.environ, TILEWISE_CACHE_DIR=str(tmp_path / "cache"), TILEWISE_REPEATS="3")
    cmd = [
        sys.executable,
        "-m",
        "tilewise.cli",
        "tune",
        "linear_add_gelu",
        "--shape",
        "M=96,N=80,K=72",
        "--budget",
        "8",
        "--seed",
        "1",
        "--db",
        db_url,
        "--json",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["evaluations"] == 8
    assert result["best"]["latency_us"] > 0 and result["default"]["latency_us"] > 0
    assert result["speedup"] == pytest.approx(
        result["default"]["latency_us"] / result["best"]["latency_us"]
    )
    assert result["infeasible"] >= result["rejected_before_compile"] >= 0

    db = store.open_store(db_url, create=False)
    with db.session() as s:
        workload = store.find_workload(s, key=result["workload"]["key"])
        assert workload is not None
        records = store.records_for(s, workload_id=workload.id)
        best = store.get_tiling(s, workload_id=workload.id, toolchain=None)
    db.close()
    ok = [r for r in records if r.status == "ok"]
    assert all(r.samples_us and r.spread is not None for r in ok)
    assert all(r.env["compiler"] and r.env["host"] for r in records)
    assert best is not None and Tiling(best.tiling) == Tiling(result["best"]["tiling"])
    assert best.latency_us == pytest.approx(result["best"]["latency_us"])

    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "tilewise.cli",
            "show",
            "linear_add_gelu",
            "--shape",
            "M=96,N=80,K=72",
            "--db",
            db_url,
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(shown.stdout)["tiling"] == result["best"]["tiling"]
