"""The replay target: recorded times through evaluations only, restrictions as constraints."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tilewise.errors import InputError
from tilewise.search import ReplaySpace, make_sampler, replay_search
from tilewise.search._bench import median_ratio, rule_budget, run_strategies, summarize

ROWS = """a,b,const,time_ms
1,10,7,5.0
1,20,7,3.0
2,10,7,inf
2,20,7,1.0
4,20,7,2.0
"""


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(ROWS)
    return path


def test_tunables_are_the_distinct_values_of_each_column(space_file: Path) -> None:
    space = ReplaySpace(space_file)
    assert space.names == ("a", "b", "const")
    assert space.values == {"a": (1, 2, 4), "b": (10, 20), "const": (7,)}
    assert (space.configs, space.valid) == (5, 4)
    assert space.candidates()[0] == {"a": 1, "b": 10, "const": 7}
    assert all("time_ms" not in c for c in space.candidates())


def test_absent_is_infeasible_without_an_evaluation(space_file: Path) -> None:
    space = ReplaySpace(space_file)
    absent = {"a": 4, "b": 10, "const": 7}
    assert not space.feasible(absent)
    result = space.evaluate(absent)
    assert result.status == "infeasible" and result.time_ms is None
    assert result.constraints == {"restrictions": 1.0}
    assert (space.evaluations, space.infeasible) == (0, 1)


def test_inf_is_a_failed_evaluation_and_times_are_returned(space_file: Path) -> None:
    space = ReplaySpace(space_file)
    failed = space.evaluate({"a": 2, "b": 10, "const": 7})
    assert failed.status == "failed" and failed.time_ms is None and failed.constraints
    ok = space.evaluate({"a": 2, "b": 20, "const": 7})
    assert ok.status == "ok" and ok.time_ms == 1.0 and not ok.constraints
    assert (space.evaluations, space.infeasible) == (2, 0)
    assert space.optimum_ms == 1.0 and space.within(0.05) == 1


def test_bad_files_are_input_errors(tmp_path: Path) -> None:
    (tmp_path / "nohead.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="time_ms"):
        ReplaySpace(tmp_path / "nohead.csv")
    with pytest.raises(InputError, match="cannot read"):
        ReplaySpace(tmp_path / "missing.csv")
    (tmp_path / "ragged.csv").write_text("a,time_ms\n1,2,3\n")
    with pytest.raises(InputError, match=":2"):
        ReplaySpace(tmp_path / "ragged.csv")
    (tmp_path / "twice.csv").write_text("a,b,time_ms\n1,2,3.0\n2,2,1.0\n1,2,0.5\n")
    with pytest.raises(InputError, match=r"twice\.csv:4 repeats the configuration of line 2"):
        ReplaySpace(tmp_path / "twice.csv")
    (tmp_path / "failed.csv").write_text("a,time_ms\n1,inf\n2,inf\n")
    with pytest.raises(InputError, match="no configuration that ran"):
        ReplaySpace(tmp_path / "failed.csv")
    for bad in ("0", "-1.5", "-inf"):
        (tmp_path / "zero.csv").write_text(f"a,time_ms\n1,2.0\n2,{bad}\n")
        with pytest.raises(
            InputError, match=re.escape(f"zero.csv:3: time '{bad}' is not positive")
        ):
            ReplaySpace(tmp_path / "zero.csv")


@pytest.mark.parametrize("strategy", ["random", "tpe", "default"])
def test_search_counts_evaluations_once_each(space_file: Path, strategy: str) -> None:
    space = ReplaySpace(space_file)
    run = replay_search(space, make_sampler(0, strategy=strategy), budget=4)
    assert space.evaluations == 4 == len(run.best_after)
    assert run.best_after == sorted(run.best_after, reverse=True)
    assert run.best_ms is not None and run.best_ms == run.best_after[-1]
    # A budget above the space ends when every configuration was evaluated once.
    space = ReplaySpace(space_file)
    run = replay_search(space, make_sampler(1, strategy=strategy), budget=50)
    assert space.evaluations == 5 and run.best_ms == 1.0
    assert run.evaluations_to(1.0) is not None and run.evaluations_to(0.5) is None


def test_every_trial_carries_the_same_constraint(space_file: Path) -> None:
    """Samplers that model constraints (Optuna's GPSampler) refuse a study whose trials carry
    different constraint sets: ok, failed and infeasible trials all carry ``violation``."""

    class Watching(optuna.samplers.RandomSampler):
        def after_trial(self, study: optuna.Study, *args: Any) -> None:
            self.study = study

    space = ReplaySpace(space_file)
    sampler = Watching(seed=0)
    replay_search(space, sampler, budget=50)
    study_trials = sampler.study.get_trials()
    assert len(study_trials) > space.configs  # the failed and the infeasible ones too
    assert {tuple(t.constraints) for t in study_trials} == {("violation",)}
    values = sorted({t.constraints["violation"] for t in study_trials})
    assert values[0] == 0.0 and values[-1] > 0  # feasible ones, and failed or infeasible ones


def _tilewise(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    cmd = [sys.executable, "-m", "tilewise.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_tune_replay_json(space_file: Path, tmp_path: Path) -> None:
    done = _tilewise(
        "tune",
        "replay",
        "--space",
        str(space_file),
        "--budget",
        "3",
        "--seed",
        "2",
        "--json",
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["evaluations"] == 3 and result["optimum_ms"] == 1.0
    assert set(result["best"]["config"]) == {"a", "b", "const"}
    assert result["best"]["time_ms"] >= 1.0
    assert not (tmp_path / "data").exists()  # nothing stored


def test_tune_replay_of_a_sparse_file_says_why_nothing_ran(tmp_path: Path) -> None:
    """Ten rows among 1,000 combinations of the columns' values, as a short tune's records:
    random proposals meet none of them, and the run says so (exit 1); the default draws from
    the rows."""
    space = tmp_path / "sparse.csv"
    rows = [(i, 10 * i, 100 * i) for i in range(10)]  # each value in one row; one row failed
    lines = [f"{a},{b},{c},{2.0 + a if a else 'inf'}" for a, b, c in rows]
    space.write_text("a,b,c,time_ms\n" + "\n".join(lines) + "\n")
    args = ("tune", "replay", "--space", str(space), "--budget", "3", "--seed", "0")
    done = _tilewise(*args, "--strategy", "random", "--json", tmp_path=tmp_path)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["best"]["time_ms"] is None and result["evaluations"] == 0
    assert (result["configs"], result["combinations"]) == (10, 1000)
    assert "which holds 10 of the 1000 combinations of its columns' values" in done.stderr
    found = _tilewise(*args, "--strategy", "default", "--json", tmp_path=tmp_path)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["best"]["time_ms"] >= 2.0


def test_tune_replay_needs_a_space(tmp_path: Path) -> None:
    done = _tilewise("tune", "replay", "--budget", "3", tmp_path=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: replay needs --space")


def test_bench_search_json_schema(space_file: Path, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    done = _tilewise(
        "bench",
        "search",
        "--space",
        str(space_file),
        "--strategy",
        "random",
        "--strategy",
        "default",
        "--budget",
        "30",
        "--seeds",
        "3",
        "--plot",
        str(plot),
        "--json",
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["space"] == str(space_file)
    assert (report["configs"], report["valid"], report["optimum_ms"]) == (5, 4, 1.0)
    assert set(report["strategies"]) == {"random", "default"}
    for entry in report["strategies"].values():
        for key in ("evals_to_5pct", "evals_to_1pct"):
            q = entry[key]
            assert set(q) == {"median", "q1", "q3", "missed", "runs"}
            # Five configurations: every run finds the optimum within the budget.
            assert q["missed"] == 0 and 1 <= q["q1"] <= q["median"] <= q["q3"] <= 5
            assert len(q["runs"]) == 3 and all(1 <= r <= 5 for r in q["runs"])
            assert q["median"] == sorted(q["runs"])[1]
        assert "against_tpe" not in entry  # TPE did not run
        assert set(entry["ratio_at"]) == {"25"} and entry["ratio_at"]["25"] == 1.0
    assert plot.stat().st_size > 0


def test_bench_search_missed_runs_count_as_budget_plus_one(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text("x,time_ms\n" + "".join(f"{i},{2.0 + i}\n" for i in range(200)))
    done = _tilewise(
        "bench",
        "search",
        "--space",
        str(path),
        "--strategy",
        "random",
        "--budget",
        "2",
        "--seeds",
        "4",
        "--json",
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    q = json.loads(done.stdout)["strategies"]["random"]["evals_to_1pct"]
    assert q["missed"] >= 3 and q["median"] == 3 and q["q3"] == 3
    assert math.isfinite(q["q1"])


def test_bench_unknown_strategy(space_file: Path, tmp_path: Path) -> None:
    done = _tilewise(
        "bench",
        "search",
        "--space",
        str(space_file),
        "--strategy",
        "annealing",
        tmp_path=tmp_path,
    )
    assert done.returncode == 2 and "unknown strategy 'annealing'" in done.stderr


def test_bench_first_seed_runs_the_later_seeds(tmp_path: Path) -> None:
    path = tmp_path / "line.csv"
    path.write_text("x,time_ms\n" + "".join(f"{i},{2.0 + i}\n" for i in range(200)))
    space = ReplaySpace(path)
    all_seeds = run_strategies(space, strategies=["random"], budget=5, seeds=4)[0]
    later = run_strategies(space, strategies=["random"], budget=5, seeds=[2, 3])[0]
    assert later.seeds == [2, 3]
    assert [r.best_after for r in later.runs] == [r.best_after for r in all_seeds.runs[2:]]

    args = ["bench", "search", "--space", str(path), "--strategy", "random", "--budget", "5"]
    done = _tilewise(*args, "--seeds", "2", "--first-seed", "2", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["seeds"], report["first_seed"]) == (2, 2)
    refused = _tilewise(*args, "--first-seed", "-1", tmp_path=tmp_path)
    assert refused.returncode == 2 and "first seed must be at least 0" in refused.stderr


def test_median_ratio_interval_holds_the_ratio_and_narrows_with_more_runs() -> None:
    fast, slow = [10, 12, 14, 16, 18], [20, 24, 28, 32, 36]
    few = median_ratio(fast, slow)
    assert few["ratio"] == 0.5  # 14 / 28
    low, high = few["interval90"]
    assert low <= 0.5 <= high and low < high
    assert median_ratio(fast, slow) == few  # seeded: the same runs, the same interval
    many = median_ratio(fast * 8, slow * 8)
    assert many["ratio"] == 0.5
    assert many["interval90"][1] - many["interval90"][0] < high - low
    # Identical runs on both sides: the ratio is 1 and so is every resample's.
    assert median_ratio([7] * 6, [7] * 6) == {"ratio": 1.0, "interval90": [1.0, 1.0]}


def test_bench_search_reports_each_strategy_against_tpe(tmp_path: Path) -> None:
    path = tmp_path / "line.csv"
    path.write_text("x,time_ms\n" + "".join(f"{i},{2.0 + i}\n" for i in range(40)))
    space = ReplaySpace(path)
    warm = [{"x": 30}]
    results = run_strategies(
        space, strategies=["tpe", "random"], budget=60, seeds=5, warm_start=warm
    )
    strategies = summarize(space, results, budget=60)["strategies"]
    assert "against_tpe" not in strategies["tpe"] and "against_tpe" not in strategies["tpe+warm"]
    # Each run against TPE's of the same kind: cold against cold, warm against warm.
    for name, tpe in (("random", "tpe"), ("random+warm", "tpe+warm")):
        entry, baseline = strategies[name], strategies[tpe]
        for key in ("evals_to_5pct", "evals_to_1pct"):
            expected = median_ratio(entry[key]["runs"], baseline[key]["runs"])
            assert entry["against_tpe"][key] == expected
            assert expected["ratio"] == round(entry[key]["median"] / baseline[key]["median"], 4)


def test_bench_search_budget_auto_follows_the_benchmarks_rule(
    space_file: Path, tmp_path: Path
) -> None:
    """max(200, ceil(E / 5) + 50), E = (N + 1) / (g + 1) random draws to 5% of the optimum:
    2,000 configurations, one within 5% (and one failed, which still costs a draw)."""
    path = tmp_path / "needle.csv"
    path.write_text(
        "x,time_ms\n0,1.0\n1,inf\n" + "".join(f"{i},{2.0 + i}\n" for i in range(2, 2000))
    )
    space = ReplaySpace(path)
    assert space.random_draws_to(0.05) == 2001 / 2
    assert rule_budget(space) == 251  # ceil(200.1) + 50
    assert rule_budget(ReplaySpace(space_file)) == 200  # a small space: the floor
    done = _tilewise(
        "bench", "search", "--space", str(path), "--strategy", "random", "--seeds", "1",
        "--budget", "auto", "--stop-at-optimum", "--json", tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["budget"] == 251 and report["random_draws_to_5pct"] == 1000.5
    for bad in ("0", "-3", "many"):
        done = _tilewise(
            "bench", "search", "--space", str(path), "--budget", bad, tmp_path=tmp_path
        )
        assert done.returncode == 2
        assert f"--budget must be a positive integer or auto, got '{bad}'" in done.stderr


def test_bench_search_refuses_a_plot_it_cannot_write_before_running(
    space_file: Path, tmp_path: Path
) -> None:
    for plot, message in (
        (tmp_path / "nodir" / "p.png", "no directory"),
        (tmp_path / "p.txt", "the name must end in one of"),
    ):
        done = _tilewise(
            "bench", "search", "--space", str(space_file), "--strategy", "random",
            "--seeds", "1", "--budget", "3", "--plot", str(plot), "--json", tmp_path=tmp_path,
        )  # fmt: skip
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert "seed 0 done" not in done.stderr and done.stdout == ""  # refused before a run
