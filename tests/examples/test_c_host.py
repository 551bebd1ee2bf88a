"""examples/c_host: the C++ host of linear_add_gelu, configured with cmake against a database
tuned here (the header from `tilewise export`, or from `tilewise serve`), built, and run at the
tuned shape (exact), at shapes it was not tuned for (the nearest tiling, or the default heuristic
where that tiling does not fit) and with the default heuristic alone. Every tiling struct the
host fills is compared with the Python spec's (OpSpec.tiling_struct), field by field."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tilewise.kernels.backends._compiler import find_compiler
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.runtime import TilingTable
from tilewise.types import Shape, Tiling

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "c_host"
SPEC = get_op("linear_add_gelu")
TUNED = {"M": 64, "N": 64, "K": 64}
DTYPE = "float32"
HEADER = Path("generated", "tilewise_linear_add_gelu.h")
#: The program's platform is Ascend910B1's (as a CANN host's PlatformAscendC would report it):
#: the tune and the export below run with the twin at those sizes whatever the environment says.
TWIN = twin_target("ascend910b1")
ENV = {k: v for k, v in os.environ.items() if k != "TILEWISE_TWIN_PROFILE"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake (scripts/setup.sh)"),
]


@dataclass
class Built:
    db_url: str
    build: Path
    tmp: Path

    @property
    def exe(self) -> Path:
        return self.build / "linear_add_gelu_host"

    def call(self, shape: dict[str, int], *args: str) -> subprocess.CompletedProcess[str]:
        text = ",".join(f"{d}={shape[d]}" for d in ("M", "N", "K"))
        return subprocess.run(
            [str(self.exe), "--shape", text, "--json", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def run(self, shape: dict[str, int], *args: str) -> tuple[int, dict[str, Any]]:
        done = self.call(shape, *args)
        assert done.stderr == "", done.stderr
        return done.returncode, json.loads(done.stdout)


def _tilewise() -> str:
    beside = Path(sys.executable).with_name("tilewise")
    found = str(beside) if beside.exists() else shutil.which("tilewise")
    assert found, "the tilewise command is not installed next to this Python"
    return found


def _configure(source: Path, build: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    compiler = find_compiler("auto")  # the compiler the tuner measured with
    return subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), f"-DCMAKE_CXX_COMPILER={compiler.path}",
         f"-DTILEWISE={_tilewise()}", *defines],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=ENV,
    )  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = tmp_path_factory.mktemp("c_host")
    db_url = f"sqlite:///{tmp / 'tilewise.db'}"
    shape = ",".join(f"{d}={v}" for d, v in TUNED.items())
    tuned = subprocess.run(
        [sys.executable, "-m", "tilewise.cli", "tune", "linear_add_gelu", "--shape", shape,
         "--budget", "3", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=ENV,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    _hold_a_tuned_tiling(db_url)
    build = tmp / "build"
    configured = _configure(EXAMPLE, build, f"-DTILEWISE_DB={db_url}")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    assert "tiling table (1 entries)" in configured.stdout
    done = subprocess.run(
        ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout + done.stderr
    return Built(db_url=db_url, build=build, tmp=tmp)


def _hold_a_tuned_tiling(db_url: str) -> None:
    """A table entry whose tiling is not its shape's default: a tuned default carries over as
    "use your default" (the header's 0), and these tests follow a nearest tiling too. A short
    tune often keeps the default; then its other measured tiling is made the entry."""
    from tilewise import store

    default = SPEC.default_tiling(Shape(TUNED), DTYPE, TWIN)
    db = store.open_store(db_url)
    try:
        with db.session() as s:
            [(workload, stored)] = store.best_tilings(
                s, op=SPEC.name, target="cpu-twin", dtype=DTYPE
            )
            if Tiling(stored.tiling) != default:
                return
            other = next(
                r
                for r in store.records_for(s, workload_id=workload.id)
                if r.status == "ok" and r.latency_us is not None and Tiling(r.tiling) != default
            )
            store.upsert_tiling(
                s,
                toolchain=stored.toolchain,
                workload_id=workload.id,
                record_id=other.id,
                tiling=Tiling(other.tiling),
                latency_us=other.latency_us,
                default_latency_us=stored.default_latency_us,
                speedup=None,
                evaluations=stored.evaluations,
            )
    finally:
        db.close()


def _assert_struct_is_the_specs(answer: dict[str, Any]) -> Tiling:
    """The struct the host filled equals OpSpec.tiling_struct for its tiling, in field order; so
    do its launch size and workspace."""
    shape = Shape(answer["shape"])
    tiling = Tiling(answer["tiling"])
    twin = TWIN
    expected = [(f.name, f.value) for f in SPEC.tiling_struct(tiling, shape, DTYPE, twin)]
    assert list(answer["tiling_struct"].items()) == expected
    assert answer["block_dim"] == SPEC.launch_blocks(
        SPEC.block_dim(tiling, shape, DTYPE, twin), twin
    )
    [workspace] = [a for a in SPEC.gm_args(shape, DTYPE) if a.role == "workspace"]
    assert answer["workspace_bytes"] == workspace.nbytes
    assert SPEC.check(tiling, shape, DTYPE, twin).valid
    return tiling


def test_the_tuned_shape_gets_its_tuned_tiling(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TILEWISE_TWIN_PROFILE", raising=False)  # the runtime's twin is TWIN
    rc, answer = built.run(TUNED, "--repeats", "2")
    assert rc == 0 and answer["ok"] is True and answer["mismatches"] == 0, answer
    assert answer["max_abs_error"] <= 1e-3
    assert answer["source"] == "exact" and answer["table_answer"] == 2
    stored = TilingTable.from_db(built.db_url).lookup(
        "linear_add_gelu", target="cpu-twin", dtype=DTYPE, shape=TUNED
    )
    assert stored.source == "exact"
    assert _assert_struct_is_the_specs(answer) == stored.tiling
    assert answer["op_version"] == SPEC.version
    assert answer["launch_us"] > 0 and answer["repeats"] == 2


@pytest.mark.parametrize(
    "shape",
    [
        {"M": 37, "N": 96, "K": 80},  # near the tuned shape, ragged in every dim
        {"M": 100, "N": 130, "K": 50},
        {"M": 1, "N": 17, "K": 3},  # the tuned baseK is larger than K
        {"M": 1024, "N": 1024, "K": 64},  # the tuned core split would need 512 cores
    ],
)
def test_an_untuned_shape_gets_the_nearest_tiling_if_it_fits(
    built: Built, shape: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TILEWISE_TWIN_PROFILE", raising=False)  # the runtime's twin is TWIN
    rc, answer = built.run(shape, "--repeats", "0")
    assert rc == 0 and answer["ok"] is True, answer
    assert answer["table_answer"] == 1  # the header's nearest, whatever it is worth here
    twin = TWIN
    offered = Tiling(answer["table_tiling"])
    verdict = SPEC.check(offered, Shape(shape), DTYPE, twin)
    tiling = _assert_struct_is_the_specs(answer)
    if verdict.valid:
        assert answer["source"] == "nearest" and tiling == offered
        # The header's contract: on a valid nearest answer, Python's runtime agrees.
        python = TilingTable.from_db(built.db_url).lookup(
            "linear_add_gelu", target="cpu-twin", dtype=DTYPE, shape=shape
        )
        assert (python.source, python.tiling) == ("nearest", tiling)
    else:
        assert answer["source"] == "default"
        assert tiling == SPEC.default_tiling(Shape(shape), DTYPE, twin)
        assert "not valid for this shape" in answer["note"]
        assert verdict.reasons[0] in answer["note"]


def test_the_header_carries_the_tuned_tiling_to_every_case_above(built: Built) -> None:
    """The header re-derives the tuned tiling for the asked shape (its core split, its base
    block capped to the shape), so even the shapes a copied tiling did not fit (K < baseK, a
    split needing 512 cores) get a valid nearest answer, as Python's runtime does."""
    for shape in (
        {"M": 37, "N": 96, "K": 80},
        {"M": 1, "N": 17, "K": 3},
        {"M": 1024, "N": 1024, "K": 64},
    ):
        answer = built.run(shape, "--plan-only")[1]
        assert answer["source"] == "nearest", (shape, answer)


DEFAULT_SHAPES = [
    {"M": 1, "N": 17, "K": 3},
    {"M": 33, "N": 40, "K": 70},
    {"M": 37, "N": 96, "K": 80},
    {"M": 100, "N": 130, "K": 50},
    {"M": 1, "N": 4096, "K": 4096},
    {"M": 128, "N": 4096, "K": 4096},
    {"M": 512, "N": 4096, "K": 1024},
    {"M": 1024, "N": 1024, "K": 1024},
    {"M": 4096, "N": 4096, "K": 4096},
    {"M": 5000, "N": 7, "K": 3},
    {"M": 77777, "N": 333, "K": 12345},
    {"M": 16, "N": 65536, "K": 8},
]


def test_the_default_heuristic_is_the_specs(built: Built) -> None:
    twin = TWIN
    for shape in DEFAULT_SHAPES:
        rc, answer = built.run(shape, "--default", "--plan-only")
        assert rc == 0 and answer["launched"] is False, answer
        assert answer["source"] == "default" and answer["table_answer"] == 0
        tiling = _assert_struct_is_the_specs(answer)
        assert tiling == SPEC.default_tiling(Shape(shape), DTYPE, twin), shape
    rc, answer = built.run({"M": 37, "N": 96, "K": 80}, "--default", "--repeats", "0")
    assert rc == 0 and answer["ok"] is True and answer["source"] == "default", answer


def _random_tiling(shape: Shape, rng: random.Random) -> Tiling:
    """Every field drawn from its domain, or (half the time, for more valid ones) the shape's
    default tiling with one to three fields drawn."""
    tunables = SPEC.runtime_tunables(shape, DTYPE, TWIN)
    if rng.random() < 0.5:
        return Tiling({t.name: rng.choice(t.values) for t in tunables})
    tiling = dict(SPEC.default_tiling(shape, DTYPE, TWIN))
    for t in rng.sample(tunables, rng.randint(1, 3)):
        tiling[t.name] = rng.choice(t.values)
    return Tiling(tiling)


def _tiling_arg(tiling: Tiling) -> str:
    return ",".join(f"{name}={value}" for name, value in tiling.items())


def test_a_given_tiling_is_checked_as_the_spec_checks_it(built: Built) -> None:
    """The host's validity check (the rules and the on-chip footprint) gives the spec's verdict
    and reasons, word for word, on random tilings of the tunables' domains."""
    rng = random.Random(20261126)
    twin = TWIN
    valid, overflows = 0, set()
    launched = 0
    shapes = (
        {"M": 37, "N": 96, "K": 80},
        {"M": 1, "N": 17, "K": 3},
        {"M": 1024, "N": 512, "K": 2048},
    )
    for shape in shapes:
        for _ in range(60):
            tiling = _random_tiling(Shape(shape), rng)
            verdict = SPEC.check(tiling, Shape(shape), DTYPE, twin)
            launch = verdict.valid and shape["M"] < 100 and launched < 6
            args = ["--tiling", _tiling_arg(tiling), "--repeats", "0"]
            done = built.call(shape, *args, *([] if launch else ["--plan-only"]))
            if verdict.valid:
                assert done.returncode == 0, (shape, tiling, done.stderr)
                answer = json.loads(done.stdout)
                assert answer["source"] == "given" and _assert_struct_is_the_specs(answer) == tiling
                if launch:
                    assert answer["ok"] is True, answer
                    launched += 1
                valid += 1
            else:
                assert done.returncode == 2 and done.stdout == ""
                assert done.stderr == (
                    "error: aclnnLinearAddGeluGetWorkspaceSize returned 561002: tiling not valid "
                    f"for this shape: {'; '.join(verdict.reasons)}\n"
                ), (shape, tiling)
                overflows |= {r.split()[0] for r in verdict.reasons if "overflow" in r}
    assert valid >= 40 and launched == 6, (valid, launched)
    assert overflows == {"UB", "L1", "L0A", "L0B", "L0C"}


def test_values_matmul_init_refuses_are_refused_before_the_launch(built: Built) -> None:
    """iterateOrder and dbL0C outside what Matmul::Init takes: refused with the spec's reasons,
    not launched into the kernel's failure."""
    shape = {"M": 64, "N": 128, "K": 128}
    valid = SPEC.default_tiling(Shape(shape), DTYPE, TWIN)
    for changes in ({"iterateOrder": 7}, {"iterateOrder": -5}, {"dbL0C": 3}):
        tiling = valid.replace(**changes)
        verdict = SPEC.check(tiling, Shape(shape), DTYPE, TWIN)
        assert not verdict.valid
        done = built.call(shape, "--tiling", _tiling_arg(tiling), "--repeats", "0")
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert done.stderr == (
            "error: aclnnLinearAddGeluGetWorkspaceSize returned 561002: tiling not valid for "
            f"this shape: {'; '.join(verdict.reasons)}\n"
        )


def test_bad_arguments_exit_2_with_one_error(built: Built) -> None:
    bad = (
        ["--shape", "M=0,N=1,K=1"],
        ["--shape", "M=4,N=4"],
        ["--tiling", "baseM=32"],
        ["--tiling", "baseM=32,warp=4"],
        ["--frobnicate"],
    )
    for args in bad:
        done = subprocess.run(
            [str(built.exe), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
        assert done.stdout == ""


def test_configure_fails_clearly_without_a_table(built: Built) -> None:
    missing = built.tmp / "missing.db"
    done = _configure(EXAMPLE, built.tmp / "bad", f"-DTILEWISE_DB=sqlite:///{missing}")
    assert done.returncode != 0
    message = " ".join(done.stderr.split())
    assert "`tilewise export linear_add_gelu --format header` failed (exit 2)" in message
    assert "does not exist" in message
    assert not missing.exists()


def test_configure_fetches_the_header_from_a_service(built: Built) -> None:
    from reliability._server import tilewise_serve

    exported = (built.build / HEADER).read_text()
    with tilewise_serve(built.tmp, db_url=built.db_url, token=None, workers=0) as served:
        done = _configure(EXAMPLE, built.tmp / "from_service", f"-DTILEWISE_URL={served.url}/")
        assert done.returncode == 0, done.stdout + done.stderr
        fetched = (built.tmp / "from_service" / HEADER).read_text()
        bad = _configure(
            EXAMPLE, built.tmp / "bad_service", f"-DTILEWISE_URL={served.url}/no/such/prefix"
        )
    assert "tiling table (1 entries)" in done.stdout

    def undated(text: str) -> str:
        return re.sub(r"\d{4}-\d\d-\d\dT[0-9:+.]+", "<date>", text)

    assert undated(fetched) == undated(exported) and fetched != undated(fetched)
    assert "tilewise_linear_add_gelu_cpu_twin_float32_lookup" in fetched
    assert bad.returncode != 0 and "cannot fetch the tiling header" in bad.stderr
