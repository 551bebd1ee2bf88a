"""The CLI's contract for scripts: exit codes, one-line errors, nothing written on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import tilewise

BAD = [
    (["tune", "matmul", "--shape", "M=4,N=4,K=4"], "unknown op 'matmul'"),
    (["tune", "linear_add_gelu", "--shape", "M=4,N=4"], "missing dim K"),
    (["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4,Z=2"], "unknown dim Z"),
    (["tune", "linear_add_gelu", "--shape", "M=0,N=4,K=4"], "M must be positive"),
    (["tune", "linear_add_gelu", "--shape", "M=-1,N=4,K=4"], "M must be positive"),
    (["tune", "linear_add_gelu", "--shape", "M=99999999,N=4,K=4"], "exceeds the limit"),
    (["tune", "linear_add_gelu", "--shape", "M=1000000,N=1000000,K=4"], "above the limit"),
    (["tune", "linear_add_gelu", "--shape", "M=x,N=4,K=4"], "M must be an integer"),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--dtype", "int8"],
        "unknown dtype 'int8'",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--target", "gpu"],
        "unknown target 'gpu'",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--budget", "0"],
        "budget must be between 1",
    ),
    (["show", "scale_relu_dropout", "--shape", "N=0"], "N must be positive"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    args: list[str], message: str, tmp_path: Path
) -> None:
    db = tmp_path / "never.db"
    done = tilewise(*args, tmp_path=tmp_path, db=f"sqlite:///{db}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert not db.exists()
    assert not (tmp_path / "cache").exists()


def test_unreachable_database(tmp_path: Path) -> None:
    done = tilewise(
        "tune",
        "scale_relu_dropout",
        "--shape",
        "N=1024",
        tmp_path=tmp_path,
        db="postgresql+psycopg://nobody@127.0.0.1:1/nothing",
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach database" in lines[0], done.stderr


def test_a_bad_setting_in_the_environment_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILEWISE_DEFAULT_BUDGET", "forty")
    db = tmp_path / "never.db"
    done = tilewise(
        "show", "scale_relu_dropout", "--shape", "N=64", tmp_path=tmp_path, db=f"sqlite:///{db}"
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TILEWISE_DEFAULT_BUDGET='forty'" in lines[0], done.stderr
    assert not db.exists()


def test_ops_lists_dims_dtypes_and_tunables(tmp_path: Path) -> None:
    done = tilewise("ops", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    ops = {row["op"]: row for row in json.loads(done.stdout)}
    assert ops["linear_add_gelu"]["dims"] == ["M", "N", "K"]
    names = {t["name"] for t in ops["linear_add_gelu"]["tunables"]}
    assert {
        "baseM",
        "baseN",
        "baseK",
        "stepM",
        "stepN",
        "depthA1",
        "depthB1",
        "dbL0C",
        "singleCoreM",
        "singleCoreN",
        "iterateOrder",
        "epiRows",
    } <= names
    compile_time = {t["name"] for t in ops["scale_relu_dropout"]["tunables"] if t["compile_time"]}
    assert compile_time == {"bufferNum"}
    table = tilewise("ops", tmp_path=tmp_path)
    assert table.returncode == 0 and "scale_relu_dropout" in table.stdout
    # Piped, rich lays tables out at 80 columns: the ops' names are still whole.
    narrow = subprocess.run(
        [sys.executable, "-m", "tilewise.cli", "ops"],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    for op in ops:
        assert op in narrow.stdout, op


def test_db_upgrade_says_what_it_did(tmp_path: Path) -> None:
    from tilewise import store

    db = f"sqlite:///{tmp_path / 'tw.db'}"
    (tmp_path / "tw.db").touch()  # an empty file: no schema yet
    created = tilewise("db", "upgrade", tmp_path=tmp_path, db=db)
    assert created.returncode == 0 and "database schema created at revision" in created.stdout
    again = tilewise("db", "upgrade", tmp_path=tmp_path, db=db)
    assert again.returncode == 0 and again.stdout.strip().endswith("nothing to do")
    old = f"sqlite:///{tmp_path / 'old.db'}"
    assert store.migrate(old, revision="0001") == (None, "0001")
    upgraded = tilewise("db", "upgrade", tmp_path=tmp_path, db=old)
    assert upgraded.returncode == 0 and "upgraded from revision 0001 to" in upgraded.stdout


def test_show_not_tuned(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'empty.db'}"
    assert tilewise("db", "upgrade", tmp_path=tmp_path, db=db).returncode == 0
    done = tilewise("show", "scale_relu_dropout", "--shape", "N=4096", tmp_path=tmp_path, db=db)
    assert done.returncode == 1
    assert "not tuned (run `tilewise tune scale_relu_dropout --shape N=4096`)" in done.stdout
    assert "the runtime answers default: the op's default heuristic" in done.stdout
    other = tilewise("show", "scale_relu_dropout", "--shape", "N=4096", "--dtype", "float16",
                     "--target", "Ascend910B1", tmp_path=tmp_path, db=db)  # fmt: skip
    assert other.returncode == 1
    assert (
        "(run `tilewise tune scale_relu_dropout --shape N=4096 --dtype float16 --target "
        "ascend910b1`)" in other.stdout.replace("\n", " ")
    ), other.stdout


def test_show_an_untuned_shape_prints_the_runtimes_nearest_answer(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tw.db'}"
    tuned = tilewise(
        "tune", "scale_relu_dropout", "--shape", "N=4096", "--budget", "2", "--json",
        tmp_path=tmp_path, db=db,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    done = tilewise(
        "show", "scale_relu_dropout", "--shape", "N=8192", "--json", tmp_path=tmp_path, db=db
    )
    assert done.returncode == 1
    shown = json.loads(done.stdout)
    runtime = shown["runtime"]
    assert shown["tuned"] is False and runtime["workload"]["shape"] == {"N": 4096}
    assert runtime["distance"] == 1.0
    # A 2-evaluation tune may keep the default: then the runtime answers this shape's default.
    assert (runtime["source"], runtime["rule"]) in {
        ("nearest", "carried"),
        ("default", "kept_default"),
    }
    text = tilewise("show", "scale_relu_dropout", "--shape", "N=8192", tmp_path=tmp_path, db=db)
    said = {
        "carried": "the runtime answers nearest: the tiling tuned for N=4096, re-derived",
        "kept_default": "the runtime answers default: this shape's default: the nearest tuned "
        "shape (N=4096) kept its default",
    }[runtime["rule"]]
    assert said in " ".join(text.stdout.split())


def test_show_of_a_missing_sqlite_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "tilewise.db"
    done = tilewise(
        "show", "scale_relu_dropout", "--shape", "N=4096", tmp_path=tmp_path, db=f"sqlite:///{path}"
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0], lines
    assert "not tuned" not in done.stdout
    assert not path.exists() and not path.parent.exists()


def test_cli_import_starts_no_numpy() -> None:
    # numpy starts threads on import; `tilewise worker` must block its stop signals before
    # any thread exists, so the CLI module must not pull numpy in at load.
    done = subprocess.run(
        [sys.executable, "-c", "import sys, tilewise.cli; print('numpy' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"
