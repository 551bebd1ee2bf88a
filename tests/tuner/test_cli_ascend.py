"""`tilewise check` and `tilewise tune --predict`: the parts of the Ascend side that run here."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from tests_support import tilewise

from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.types import Shape

SHAPE = "M=1024,N=1024,K=1024"


def default_json(dtype: str = "float32") -> str:
    spec, target = get_op("linear_add_gelu"), get_target("ascend910b1")
    return json.dumps(dict(spec.default_tiling(Shape.parse(SHAPE), dtype, target)))


def test_check_valid_tiling_with_compiler(tmp_path: Path) -> None:
    pytest.importorskip("ascendnpuir")
    done = tilewise(
        "check",
        "linear_add_gelu",
        "--shape",
        SHAPE,
        "--target",
        "ascend910b1",
        "--tiling",
        default_json(),
        "--compiler",
        "--predict",
        "--json",
        tmp_path=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["valid"] is True and out["reasons"] == []
    assert set(out["footprint"]) == {"ub", "l1", "l0a", "l0b", "l0c", "bt"}
    assert out["footprint"]["ub"] <= out["limits"]["ub"]
    assert out["compiler"]["verdict"] == "fits"
    assert out["predicted"]["label"] == "predicted" and out["predicted"]["predicted_us"] > 0


def test_check_invalid_tiling_exits_1_with_reasons(tmp_path: Path) -> None:
    tiling = json.loads(default_json())
    tiling.update(baseN=256, baseK=64, epiRows=128)
    done = tilewise(
        "check",
        "linear_add_gelu",
        "--shape",
        SHAPE,
        "--target",
        "ascend910b1",
        "--tiling",
        json.dumps(tiling),
        "--json",
        tmp_path=tmp_path,
    )
    assert done.returncode == 1
    out = json.loads(done.stdout)
    assert not out["valid"] and any(r.startswith("L0B overflow") for r in out["reasons"])


@pytest.mark.parametrize(
    ("tiling", "message"),
    [
        ('{"baseM": 128', "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"baseM": "x"}', "baseM must be an integer"),
        ('{"baseM": 1e30}', "baseM must be an integer"),
        ('{"baseM": 99999999999}', "out of range"),
        ('{"baseMM": 128}', "no field 'baseMM' (did you mean baseM?)"),
        ('{"baseM": -16, "epiRows": -16}', "baseM=-16 is outside its domain 16.."),
        ('{"epiRows": 0}', "epiRows=0 is outside its domain"),
    ],
)
def test_check_bad_tiling_is_exit_2(tiling: str, message: str, tmp_path: Path) -> None:
    done = tilewise(
        "check", "linear_add_gelu", "--shape", SHAPE, "--tiling", tiling, tmp_path=tmp_path
    )
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1


def test_predict_ranks_without_measuring_or_writing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    done = tilewise(
        "tune",
        "linear_add_gelu",
        "--shape",
        SHAPE,
        "--target",
        "ascend910b1",
        "--dtype",
        "float16",
        "--predict",
        "--budget",
        "5",
        "--seed",
        "3",
        "--json",
        tmp_path=tmp_path,
        db=f"sqlite:///{db}",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "predicted" in out["label"] and "nothing was measured" in out["label"]
    times = [row["predicted_us"] for row in out["ranking"]]
    assert len(times) == 5 and times == sorted(times)
    assert all(row["label"] == "predicted" for row in out["ranking"])
    assert out["best"]["predicted_us"] <= out["default"]["predicted_us"]
    assert not db.exists()


def test_predict_refuses_the_twin(tmp_path: Path) -> None:
    done = tilewise("tune", "linear_add_gelu", "--shape", SHAPE, "--predict", tmp_path=tmp_path)
    assert done.returncode == 2 and "models Ascend targets" in done.stderr


def test_worker_on_an_npu_target_without_cann_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    done = tilewise(
        "worker",
        "--target",
        "ascend910b2",
        "--device",
        "3",
        tmp_path=tmp_path,
        db=f"sqlite:///{tmp_path / 'w.db'}",
    )
    assert done.returncode == 2
    assert "CANN toolkit not found: set ASCEND_HOME_PATH or source" in done.stderr


def test_worker_with_cann_but_no_npu_serves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host with the toolkit and no device would claim every job of the target and fail it:
    the worker refuses to start instead, naming what is missing."""
    from typer.testing import CliRunner

    from tests.kernels.backends.ascend.ascend_fakes import make_toolkit
    from tilewise.cli import app
    from tilewise.kernels.backends._ascend.backend import AscendBackend

    home = make_toolkit(tmp_path / "Ascend", functional=True)
    platform = home / "x86_64-linux" / "data" / "platform_config"
    shutil.copy(Path(__file__).parents[1] / "kernels" / "data" / "Ascend910B2.ini", platform)
    (tmp_path / "dev").mkdir()  # no davinci0
    monkeypatch.setattr(AscendBackend, "dev_root", tmp_path / "dev")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    db = f"sqlite:///{tmp_path / 'w.db'}"
    done = CliRunner().invoke(app, ["worker", "--target", "ascend910b2", "--db", db])
    assert done.exit_code == 2, done.output
    assert "run mode npu needs an Ascend NPU on this host" in done.output
    # The command blocked SIGINT and SIGTERM for its worker; ending without one, it lifts the
    # block (else this process, and every child it starts, would ignore them).
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGINT, signal.SIGTERM}


def test_serve_refuses_workers_that_could_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each would exit at its start, and serve would restart it without end."""
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    done = tilewise(
        "serve", "--target", "ascend910b2", "--port", "1",
        tmp_path=tmp_path, db=f"sqlite:///{tmp_path / 's.db'}",
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: CANN toolkit not found")
    assert line.endswith("(--workers 0 serves the API alone)")


def test_tune_on_an_npu_target_without_cann_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    db = tmp_path / "t.db"
    done = tilewise(
        "tune", "scale_relu_dropout", "--shape", "N=4096", "--target", "ascend910b2",
        tmp_path=tmp_path, db=f"sqlite:///{db}",
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: CANN toolkit not found: set ASCEND_HOME_PATH or source")
    assert "set_env.sh" in line
    assert not db.exists()  # stopped before the database


@pytest.mark.slow
def test_tune_on_an_npu_target_runs_the_ascend_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CANN installed (the fake toolkit: CMake project, stub ACL, a device node), the main
    command tunes on the Ascend backend and stores the winner for the Ascend target."""
    from typer.testing import CliRunner

    from tests.kernels.backends.ascend.ascend_fakes import make_toolkit
    from tilewise import store
    from tilewise.cli import app
    from tilewise.kernels.backends._ascend.backend import AscendBackend

    home = make_toolkit(tmp_path / "Ascend", functional=True)
    platform = home / "x86_64-linux" / "data" / "platform_config"
    shutil.copy(Path(__file__).parents[1] / "kernels" / "data" / "Ascend910B2.ini", platform)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "davinci0").write_text("")
    monkeypatch.setattr(AscendBackend, "dev_root", dev)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    monkeypatch.setenv("TILEWISE_CACHE_DIR", str(tmp_path / "cache"))
    db = f"sqlite:///{tmp_path / 't.db'}"
    args = ["tune", "scale_relu_dropout", "--shape", "N=4096", "--target", "ascend910b2"]
    done = CliRunner().invoke(app, [*args, "--budget", "3", "--db", db, "--json"])
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["best"] is not None and result["evaluations"] >= 1 and result["failed"] == 0
    opened = store.open_store(db, create=False)
    with opened.session() as s:
        [(workload, best)] = store.best_tilings(s, op="scale_relu_dropout")
    opened.close()
    assert workload.target == "ascend910b2" and best.latency_us > 0
