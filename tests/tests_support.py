"""Helpers shared by test modules (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tilewise import store as st
from tilewise.kernels.backends import current_toolchain
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.types import Shape, Tiling, Toolchain, Workload

LAG = get_op("linear_add_gelu")
TWIN = get_target("cpu-twin")
RULES = LAG.carry_rules("float32", TWIN)
PORTFOLIO_DRIVER = Path(__file__).parent / "tuner" / "header_driver" / "portfolio_driver.c"


def tilewise(*args: str, tmp_path: Path, db: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        TILEWISE_CACHE_DIR=str(tmp_path / "cache"),
        HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path / "data"),
        COLUMNS="200",
    )
    cmd = [sys.executable, "-m", "tilewise.cli", *args]
    if db is not None:
        cmd += ["--db", db]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


def host_toolchain() -> Toolchain:
    """The toolchain this host tunes the cpu-twin with: what lookups here serve. Ascend targets
    have no current toolchain on a host without CANN, so it serves for them too."""
    found = current_toolchain("cpu-twin")
    assert found is not None, "no C++ compiler for the cpu-twin"
    return found


# ---------------------------------------------------------------------------------------------
# A portfolio's records (tests/tuner/test_export_portfolio.py, test_runtime_portfolio.py)

PORTFOLIO_SHAPES = [
    Shape({"M": 64, "N": 256, "K": 256}),
    Shape({"M": 256, "N": 256, "K": 256}),
    Shape({"M": 1024, "N": 256, "K": 256}),
    Shape({"M": 256, "N": 1024, "K": 1024}),
]


#: Each tuned shape's best tiling is the default of a shape this many times larger in M and N:
#: not its own default, and, carried, five distinct tilings at every shape with the default.
_SCALED = {0: (2, 2), 1: (4, 1), 2: (1, 4), 3: (2, 2)}


def portfolio_best(shape: Shape) -> Tiling:
    m, n = _SCALED[PORTFOLIO_SHAPES.index(shape)] if shape in PORTFOLIO_SHAPES else (2, 2)
    return LAG.default_tiling(
        Shape({"M": shape["M"] * m, "N": shape["N"] * n, "K": shape["K"]}), "float32", TWIN
    )


def portfolio_carried(source: Shape, to: Shape) -> Tiling:
    tiling = LAG.carry(
        portfolio_best(source), source, to, "float32", TWIN
    )  # itself at its own shape
    assert tiling is not None
    return tiling


def ok_record(
    session: Any, workload_id: int, tiling: Tiling, latency: float, *, spread: float = 0.02
) -> int:
    """A search's ok record of ``tiling`` measured at ``latency`` µs on this host's toolchain."""
    return st.add_record(
        session,
        toolchain=host_toolchain(),
        workload_id=workload_id,
        tiling=tiling,
        status="ok",
        latency_us=latency,
        spread=spread,
        source="search",
        env={"host": "test"},
    ).id


def portfolio_record(session: Any, workload_id: int, tiling: Tiling, latency: float) -> int:
    return ok_record(session, workload_id, tiling, latency, spread=0.01)


def tuned_best_and_default(session: Any, shapes: list[Shape]) -> None:
    """Each of ``shapes`` tuned: its :func:`portfolio_best` at 50 µs stored as the winner, its
    default measured at 60 µs; nothing else measured."""
    for shape in shapes:
        workload = st.commit_workload(
            session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", shape)
        )
        best = portfolio_best(shape)
        rid = portfolio_record(session, workload.id, best, 50.0)
        portfolio_record(session, workload.id, LAG.default_tiling(shape, "float32", TWIN), 60.0)
        st.upsert_tiling(
            session, workload_id=workload.id, record_id=rid, tiling=best, latency_us=50.0,
            default_latency_us=60.0, speedup=1.2, evaluations=2, toolchain=host_toolchain(),
        )  # fmt: skip


def portfolio_tuned_set(session: Any) -> None:
    """Candidates A..D are the best tilings of shapes 0..3. Within 5%: A covers 0, 1, 2 (and was
    measured 20% slower at 3), B covers 0, 1, 2 (not measured at 3), D and the default cover 3
    (D at 1.00, the default at 1.04). C was never measured at 3: it does not cover it."""
    a, b, c, d = PORTFOLIO_SHAPES
    measured = {
        0: {(0, a): 100.0, (1, a): 103.0, (None, a): 150.0},  # (candidate, shape): µs
        1: {(1, b): 100.0, (0, b): 104.0, (None, b): 150.0},
        2: {(2, c): 100.0, (0, c): 101.5, (1, c): 101.0, (None, c): 150.0},
        3: {(3, d): 100.0, (None, d): 104.0, (0, d): 120.0},
    }
    tilings = [portfolio_best(s) for s in PORTFOLIO_SHAPES]
    assert len({RULES.relative(t, s) for t, s in zip(tilings, PORTFOLIO_SHAPES, strict=True)}) == 4
    for at in PORTFOLIO_SHAPES:  # five distinct tilings at every shape: no record stands for two
        carried = {portfolio_carried(source, at) for source in PORTFOLIO_SHAPES}
        assert len(carried | {LAG.default_tiling(at, "float32", TWIN)}) == 5
    for i, shape in enumerate(PORTFOLIO_SHAPES):
        workload = st.commit_workload(
            session, Workload(LAG.name, LAG.version, "cpu-twin", "float32", shape)
        )
        ids = {}
        for (source, at), latency in measured[i].items():
            tiling = (
                LAG.default_tiling(at, "float32", TWIN)
                if source is None
                else portfolio_carried(PORTFOLIO_SHAPES[source], at)
            )
            assert tiling != LAG.default_tiling(at, "float32", TWIN) or source is None
            ids[source] = portfolio_record(session, workload.id, tiling, latency)
        st.upsert_tiling(
            session,
            toolchain=host_toolchain(),
            workload_id=workload.id,
            record_id=ids[i],
            tiling=tilings[i],
            latency_us=100.0,
            default_latency_us=measured[i][(None, shape)],
            speedup=measured[i][(None, shape)] / 100.0,
            evaluations=len(measured[i]),
        )


# The C compilers a generated header is built with, and the portfolio's driver


def c_compilers() -> list[tuple[str, list[str]]]:
    found = []
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        found.append((cc, ["-std=c99", "-x", "c"]))
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx:
        found.append((cxx, ["-std=c++11", "-x", "c++"]))
    return found


def build_header_driver(
    header: Path,
    driver: Path,
    exe: Path,
    compiler: str,
    std: list[str],
    op: str,
    functions: dict[str, str],
) -> Path:
    """Compile ``driver`` (a C file reading shapes from stdin) against a generated ``header``
    of ``op``, strict warnings as errors; ``functions`` maps the driver's macros (TW_LOOKUP,
    TW_MEMBER ...) to the header's function names."""
    ndims = len(get_op(op).dims)
    cmd = [
        compiler,
        *std,
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        f'-DTW_HEADER="{header}"',
        *(f"-D{macro}={name}" for macro, name in functions.items()),
        f"-DTW_FIELDS=TILEWISE_{op.upper()}_FIELDS",
        f"-DTW_NDIMS={ndims}",
        "-DTW_ARGS=" + ", ".join(f"(int64_t)d[{i}]" for i in range(ndims)),
        str(driver),
        "-o",
        str(exe),
        "-lm",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, " ".join(cmd) + "\n" + done.stderr
    return exe


def build_portfolio_driver(header: Path, tmp_path: Path, compiler: str, std: list[str]) -> Path:
    op = LAG.name
    return build_header_driver(
        header,
        PORTFOLIO_DRIVER,
        tmp_path / f"portfolio-{Path(compiler).name}",
        compiler,
        std,
        op,
        {"TW_MEMBER": f"tilewise_{op}_member", "TW_MEMBER_TILING": f"tilewise_{op}_member_tiling"},
    )


def portfolio_driver_answers(header: Path, tmp_path: Path, text: str) -> list[tuple[str, Any]]:
    """Per C compiler, the portfolio driver's answers (one list of integers per line) to the
    shapes in ``text``, built against ``header``."""
    answers = []
    for compiler, std in c_compilers():
        exe = build_portfolio_driver(header, tmp_path, compiler, std)
        done = subprocess.run(
            [str(exe)], input=text, capture_output=True, text=True, timeout=60, check=True
        )
        answers.append(
            (compiler, [[int(v) for v in line.split()] for line in done.stdout.splitlines()])
        )
    return answers


def wsgi_get(app: Any, path: str) -> Any:
    """The JSON body of a GET of ``path`` from the WSGI ``app`` (optuna-dashboard's), asserting
    a 200."""
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "test",
        "SERVER_PORT": "80",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
    }
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    assert status[0].startswith("200"), (path, status, body[:200])
    return json.loads(body)
