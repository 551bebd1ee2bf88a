"""A tiling stored with another toolchain (an older compiler, changed twin headers): `show`,
`export` and the runtime leave it out and say why; --any-toolchain shows it; a re-tune with
this host's toolchain stores its own winner, and `show` prints the history of winners."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import host_toolchain, tilewise

from tilewise import store
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Toolchain, Workload

SPEC = get_op("scale_relu_dropout")
SHAPE = Shape({"N": 4096})
ARGS = ("scale_relu_dropout", "--shape", "N=4096")


def _old(compiler: str | None = None, headers: str | None = None) -> Toolchain:
    now = host_toolchain()
    return Toolchain(now.backend, compiler or now.compiler, headers or now.headers, now.profile)


def _seed(db_url: str, toolchain: Toolchain) -> dict[str, int]:
    """The workload's tuned tiling (one that is not the default), stored with ``toolchain``."""
    default = SPEC.default_tiling(SHAPE, "float32", twin_target())
    tiling = default.replace(tileLength=default["tileLength"] // 2)
    assert SPEC.valid(tiling, SHAPE, "float32", twin_target())
    db = store.open_store(db_url)
    try:
        with db.session() as s:
            row = store.commit_workload(
                s, Workload(SPEC.name, SPEC.version, "cpu-twin", "float32", SHAPE)
            )
            record = store.add_record(
                s, workload_id=row.id, tiling=tiling, status="ok", latency_us=20.0,
                source="remeasure", env={}, toolchain=toolchain,
            )  # fmt: skip
            store.upsert_tiling(
                s, workload_id=row.id, toolchain=toolchain, record_id=record.id, tiling=tiling,
                latency_us=20.0, default_latency_us=30.0, speedup=1.5, evaluations=5,
            )  # fmt: skip
    finally:
        db.close()
    return dict(tiling)


@pytest.fixture
def old_db(tmp_path: Path) -> tuple[str, dict[str, int]]:
    db = f"sqlite:///{tmp_path / 'tw.db'}"
    return db, _seed(db, _old(compiler="clang 18.1"))


def test_show_says_a_tiling_of_another_compiler_is_stale_and_not_served(
    old_db: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    db, tiling = old_db
    now = host_toolchain().compiler
    done = tilewise("show", *ARGS, tmp_path=tmp_path, db=db)
    assert done.returncode == 1, done.stderr
    text = " ".join(done.stdout.split())
    assert "not tuned" in text and "the runtime answers default" in text
    assert f"not served, stale: compiled with clang 18.1 (now {now})" in text
    assert "--any-toolchain shows it" in text
    assert "history of winners" in text and "first winner" in text
    shown = json.loads(tilewise("show", *ARGS, "--json", tmp_path=tmp_path, db=db).stdout)
    assert shown["tuned"] is False and shown["runtime"]["source"] == "default"
    [stale] = shown["stale"]
    assert stale["tiling"] == tiling
    assert stale["stale"] == f"compiled with clang 18.1 (now {now})"
    assert [h["reason"] for h in shown["history"]] == ["first winner"]


def test_any_toolchain_shows_the_stale_tiling(
    old_db: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    db, tiling = old_db
    done = tilewise("show", *ARGS, "--any-toolchain", tmp_path=tmp_path, db=db)
    assert done.returncode == 0, done.stderr
    assert "stale: compiled with clang 18.1" in " ".join(done.stdout.split())
    shown = json.loads(
        tilewise("show", *ARGS, "--any-toolchain", "--json", tmp_path=tmp_path, db=db).stdout
    )
    assert shown["tuned"] is True and shown["tiling"] == tiling
    assert shown["toolchain"]["compiler"] == "clang 18.1"
    assert shown["stale"].startswith("compiled with clang 18.1")


def test_changed_twin_headers_are_named(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tw.db'}"
    _seed(db, _old(headers="twin 000000000000"))
    shown = json.loads(tilewise("show", *ARGS, "--json", tmp_path=tmp_path, db=db).stdout)
    assert [s["stale"] for s in shown["stale"]] == ["twin headers changed"]


def test_export_and_the_runtime_skip_it_unless_any_toolchain(
    old_db: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    db, tiling = old_db
    out = tmp_path / "t.json"
    done = tilewise("export", "scale_relu_dropout", "-o", str(out), tmp_path=tmp_path, db=db)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["entries"] == []
    assert "left out 1 entries measured with another toolchain" in " ".join(done.stderr.split())
    done = tilewise(
        "export", "scale_relu_dropout", "-o", str(out), "--any-toolchain", tmp_path=tmp_path, db=db
    )
    assert done.returncode == 0, done.stderr
    assert [e["tiling"] for e in json.loads(out.read_text())["entries"]] == [tiling]
    header = tmp_path / "t.h"
    done = tilewise(
        "export", "scale_relu_dropout", "--format", "header", "-o", str(header),
        tmp_path=tmp_path, db=db,
    )  # fmt: skip
    assert done.returncode == 0 and "wrote 0 entries" in done.stderr

    asked = {"N": 4096}
    served = TilingTable.from_db(db).lookup(
        "scale_relu_dropout", target="cpu-twin", dtype="float32", shape=asked
    )
    assert served.source == "default" and dict(served.tiling) != tiling
    anyway = TilingTable.from_db(db, any_toolchain=True).lookup(
        "scale_relu_dropout", target="cpu-twin", dtype="float32", shape=asked
    )
    assert anyway.source == "exact" and dict(anyway.tiling) == tiling


@pytest.mark.slow
def test_a_retune_stores_a_fresh_winner_beside_the_stale_one(
    old_db: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    db, tiling = old_db
    tuned = tilewise("tune", *ARGS, "--budget", "2", "--json", tmp_path=tmp_path, db=db)
    assert tuned.returncode == 0, tuned.stderr
    shown = json.loads(tilewise("show", *ARGS, "--json", tmp_path=tmp_path, db=db).stdout)
    assert shown["tuned"] is True and shown["stale"] is None
    assert shown["toolchain"]["id"] == host_toolchain().id
    [other] = shown["other_toolchains"]
    assert other["tiling"] == tiling and other["stale"].startswith("compiled with clang 18.1")
    reasons = [h["reason"] for h in shown["history"]]
    assert reasons[0] == "first winner" and len(reasons) == 2
    assert reasons[1] == (
        f"first winner of this toolchain (earlier winner: clang 18.1, {host_toolchain().headers})"
    )
    assert shown["history"][1]["toolchain"] == host_toolchain().id
    text = " ".join(tilewise("show", *ARGS, tmp_path=tmp_path, db=db).stdout.split())
    assert "this host's" in text and "also stored, stale: compiled with clang 18.1" in text
