"""`tilewise tune` across runs and interruptions: what it says it continued and what it kept."""

from __future__ import annotations

import importlib.abc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests_support import tilewise

from tilewise import __version__

SHAPE = "N=4096"


def _count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def test_a_second_tune_says_it_continues_the_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tw.db'}"
    args = ("tune", "scale_relu_dropout", "--shape", SHAPE, "--budget", "3", "--seed", "1")
    first = tilewise(*args, "--json", tmp_path=tmp_path, db=url)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["earlier_evaluations"] == 0
    second = tilewise(*args, tmp_path=tmp_path, db=url)
    assert second.returncode == 0, second.stderr
    measured = _count(tmp_path / "tw.db", "tw_records WHERE source != 'remeasure'")
    assert "continuing the study of this workload" in second.stderr
    said = int(second.stderr.split("workload: ")[1].split()[0])
    assert 3 <= said <= measured
    third = tilewise(*args, "--json", tmp_path=tmp_path, db=url)
    assert json.loads(third.stdout)["earlier_evaluations"] > said


def test_a_tune_that_ran_nothing_exits_1_with_and_without_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tw.db'}"
    args = ("tune", "scale_relu_dropout", "--shape", SHAPE, "--budget", "3", "--seconds", "1e-6")
    for json_flag in (("--json",), ()):
        done = tilewise(*args, *json_flag, tmp_path=tmp_path, db=url)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            "error: the time limit of 1e-06 s ran out before the first evaluation"
        )
        if json_flag:
            assert json.loads(done.stdout)["best"] is None


@pytest.mark.parametrize(
    ("stop", "whole_group"),
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-process", "ctrl-c-to-its-group", "sigterm"],
)
def test_ctrl_c_stops_after_the_evaluation_in_flight_and_says_what_was_kept(
    tmp_path: Path, stop: signal.Signals, whole_group: bool
) -> None:
    """SIGINT to the tune alone, or to its process group as a terminal's Ctrl-C sends it: the
    compile or launch in flight is not killed with it, so no tiling is recorded (or its build
    cached) as failed for being interrupted. SIGTERM stops it the same way: no claim is left
    for the next tune of the workload to wait on."""
    db = tmp_path / "tw.db"
    env = dict(
        os.environ,
        TILEWISE_CACHE_DIR=str(tmp_path / "cache"),
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )
    cmd = [sys.executable, "-m", "tilewise.cli", "tune", "scale_relu_dropout", "--shape", SHAPE]
    cmd += ["--budget", "500", "--db", f"sqlite:///{db}"]
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _count(db, "tw_records") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _count(db, "tw_records") >= 2, "the tune made no records in 120 s"
        if whole_group:
            os.killpg(proc.pid, stop)
        else:
            proc.send_signal(stop)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "stopping after the evaluation in flight" in stderr
    assert "interrupted: the" in stderr and "no winner is stored" in stderr
    assert "Traceback" not in stderr
    kept = _count(db, "tw_records")
    assert kept >= 2 and _count(db, "tw_tilings") == 0
    assert _count(db, "tw_records WHERE status NOT IN ('ok', 'infeasible')") == 0
    assert _count(db, "tw_tiling_claims") == 0
    failed_builds = [
        p for p in (tmp_path / "cache").rglob("build.json") if '"ok": false' in p.read_text()
    ]
    assert not failed_builds, [p.read_text() for p in failed_builds]


def test_the_summary_says_what_proposing_cost(tmp_path: Path) -> None:
    """The strategy's seconds per proposal: in the JSON, and a line of the table's summary."""
    args = ("tune", "scale_relu_dropout", "--shape", SHAPE, "--budget", "3", "--seed", "2")
    done = tilewise(*args, "--json", tmp_path=tmp_path, db=f"sqlite:///{tmp_path / 'a.db'}")
    assert done.returncode == 0, done.stderr
    times = json.loads(done.stdout)["propose_s"]
    assert set(times) == {"median_s", "cpu_median_s", "late_s", "total_s"}
    assert times["median_s"] is not None and 0 <= times["median_s"] <= times["total_s"]
    shown = tilewise(*args, tmp_path=tmp_path, db=f"sqlite:///{tmp_path / 'b.db'}")
    assert shown.returncode == 0, shown.stderr
    assert "s median per proposal (CPU" in shown.stdout and "s in all" in shown.stdout


def test_ctrl_c_while_the_command_imports_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry point's imports take a few hundred ms; a Ctrl-C inside them (raised here by
    the import system at the command's package) ends as a Ctrl-C later does, not in a
    traceback."""
    from tilewise.__main__ import main

    class Interrupted(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: object, target: object = None) -> None:
            if name == "tilewise.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "tilewise.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_python_dash_m_tilewise_is_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tilewise", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tilewise", __version__]
