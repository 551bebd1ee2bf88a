"""The measures of SECURITY.md, each checked as it stands (tests/api/test_api_security.py holds
the first proofs over the in-process client; these add the code scans, the generated inputs and
a real server):

* writes need the bearer token, compared in constant time;
* compile and launch paths take validated integers and enum values only, as argument lists;
* request bodies are size-limited on a real server (a declared length and a chunked body);
* neither the token nor the database password shows in logs or command output;
* CORS is closed by default.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import socket
import string
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine
from tests_support import tilewise

from tests.api._support import AUTH, TOKEN, live_server, make_settings
from tests.reliability._report import record
from tests.reliability._server import Served, pg_database, tilewise_serve
from tilewise.api import create_app
from tilewise.kernels.ops import OPS, get_op
from tilewise.kernels.targets import get_target, list_targets
from tilewise.types import DTYPES, MAX_DIM, Shape, Tiling

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
JOB: dict[str, Any] = {"op": "scale_relu_dropout", "shape": {"N": 4096}, "budget": 5}


def python_files(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


# ---------------------------------------------------------------------------------------------
# The token


def test_the_token_is_compared_in_constant_time() -> None:
    """require_writer compares with hmac.compare_digest, and nothing in the API compares the
    token (or the credentials sent) with == or !=."""
    source = (ROOT / "api" / "deps.py").read_text()
    tree = ast.parse(source)
    writer = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "require_writer"
    )
    calls = {ast.unparse(n.func) for n in ast.walk(writer) if isinstance(n, ast.Call)}
    assert "hmac.compare_digest" in calls
    for path in python_files("api"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops
            ):
                text = ast.unparse(node)
                assert not re.search(r"api_token|credentials|authorization", text, re.I), (
                    f"{path.relative_to(ROOT)}:{node.lineno}: {text}"
                )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('security') / 'tilewise.db'}"
    with live_server(make_settings(url, max_body_bytes=4096)) as base:
        yield base


HEADER_TEXT = st.text(alphabet=string.printable.strip(), max_size=40)
WRONG_TOKENS = st.one_of(
    HEADER_TEXT,
    st.sampled_from([TOKEN.upper(), TOKEN[:-1], TOKEN + "x", "x" + TOKEN, TOKEN[::-1], ""]),
    st.builds(lambda a, b: a + TOKEN + b, HEADER_TEXT, HEADER_TEXT),
).filter(lambda t: t.strip() != TOKEN)


@FUZZ
@given(
    token=WRONG_TOKENS,
    scheme=st.sampled_from(["Bearer", "bearer", "Basic", "Token", ""]),
    path=st.sampled_from(["/v1/jobs", "/v1/jobs/1/cancel"]),
)
def test_a_wrong_token_never_writes(live: str, token: str, scheme: str, path: str) -> None:
    headers = {"Authorization": f"{scheme} {token}".strip()} if scheme or token else {}
    r = httpx.post(f"{live}{path}", json=JOB, headers=headers, timeout=30)
    assert r.status_code == 401, (headers, r.status_code, r.text)
    assert r.headers["www-authenticate"] == "Bearer"
    assert TOKEN not in r.text


def test_the_token_writes_and_nothing_else_did(live: str) -> None:
    """After every wrong token above (same module, same server): no job, then one."""
    assert httpx.get(f"{live}/v1/jobs", timeout=30).json()["jobs"] == []
    r = httpx.post(f"{live}/v1/jobs", json=JOB, headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text


# ---------------------------------------------------------------------------------------------
# Compile and launch paths: argument lists, validated integers and enum values


def _subprocess_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.startswith(("subprocess.", "os.", "asyncio.create_subprocess")):
                yield node


def test_no_shell_in_compile_launch_or_service_paths() -> None:
    """No shell=True, os.system, os.popen, os.exec*, subprocess.getoutput; every subprocess
    command is a list; the one ``bash -c`` (sourcing CANN's set_env.sh) takes a constant script
    and the file's path as a separate argument."""
    forbidden = re.compile(
        r"^os\.(system|popen|exec\w*|spawn\w*)$|^subprocess\.(getoutput|getstatusoutput)$"
    )
    checked = 0
    for path in python_files("kernels", "tuner", "api"):
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(ROOT))
        for call in _subprocess_calls(tree):
            name = ast.unparse(call.func)
            assert not forbidden.match(name), f"{where}:{call.lineno}: {name}"
            for keyword in call.keywords:
                if keyword.arg == "shell":
                    assert (
                        isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                    ), f"{where}:{call.lineno}: shell={ast.unparse(keyword.value)}"
            if name in (
                "subprocess.run",
                "subprocess.Popen",
                "subprocess.call",
                "subprocess.check_output",
                "subprocess.check_call",
            ):
                checked += 1
                command = call.args[0] if call.args else None
                assert not isinstance(command, ast.Constant | ast.JoinedStr | ast.BinOp), (
                    f"{where}:{call.lineno}: a command given as a string"
                )
        # ["bash", "-c", SCRIPT, ...] / ["sh", "-c", ...]: only with a constant script
        for node in ast.walk(tree):
            if isinstance(node, ast.List) and len(node.elts) >= 3:
                head = [e.value if isinstance(e, ast.Constant) else None for e in node.elts[:2]]
                if head[0] in ("bash", "sh", "/bin/sh", "/bin/bash") and head[1] == "-c":
                    script = node.elts[2]
                    assert isinstance(script, ast.Name) and _is_constant_str(tree, script.id), (
                        f"{where}:{node.lineno}: {ast.unparse(node)}"
                    )
    assert checked >= 5  # the scan sees the compiler, runner and service calls


def _is_constant_str(tree: ast.AST, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    return False


def test_tilings_hold_integers_only() -> None:
    """What reaches a build (-D macros) and a launch (the packed struct) is integers and the
    C name of a dtype from a fixed table."""
    with pytest.raises(ValueError):
        Tiling({"tileLength": "4096; rm -rf /"})
    with pytest.raises((TypeError, ValueError)):
        Tiling({"tileLength": None})  # type: ignore[dict-item]
    for name in sorted(OPS):
        spec = get_op(name)
        for dtype in spec.dtypes:
            shape = Shape({d: 64 if d not in ("stride", "pad") else 1 for d in spec.dims})
            tiling = spec.default_tiling(shape, dtype, get_target("cpu-twin"))
            for macro, value in spec.compile_key(tiling, dtype).items():
                assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", macro), macro
                assert re.fullmatch(r"-?\d+|float|half|[a-z_0-9]+_t", value), (macro, value)
            packed = spec.pack_tiling(tiling, shape, dtype, get_target("cpu-twin"))
            assert len(packed) % 4 == 0
        with pytest.raises(KeyError):
            spec.compile_key(tiling, "float32 -DEVIL=1")


_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"}


def _not_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


BAD_FIELD_VALUES: dict[str, Any] = {
    "op": st.one_of(st.text(max_size=30).filter(lambda t: t not in OPS), st.integers(), st.none()),
    "dtype": st.one_of(st.text(max_size=12).filter(lambda t: t not in DTYPES), st.floats()),
    "target": st.one_of(
        st.text(max_size=16).filter(
            lambda t: t.strip().lower() not in {p.name for p in list_targets()}
        ),
        st.lists(st.text(max_size=3), max_size=2),
    ),
    "shape": st.one_of(
        st.fixed_dictionaries(
            {
                "N": st.one_of(
                    st.text(max_size=8),
                    st.floats(),
                    st.integers(max_value=0),
                    st.integers(min_value=MAX_DIM + 1),
                    st.booleans(),
                    st.lists(st.integers(), max_size=2),
                )
            }
        ),
        st.dictionaries(
            st.text(max_size=4).filter(lambda k: k != "N"),
            st.integers(1, 64),
            min_size=1,
            max_size=3,
        ),
        st.text(max_size=10),
        st.integers(),
    ),
    "budget": st.one_of(
        st.integers(max_value=0),
        st.integers(min_value=5001),
        st.text(max_size=6).filter(_not_float),
        st.floats().filter(lambda f: not (math.isfinite(f) and f == int(f) and 1 <= f <= 5000)),
    ),
    "seconds": st.one_of(
        st.floats(max_value=0), st.text(max_size=6).filter(_not_float), st.just([1])
    ),
    "force": st.one_of(
        st.text(max_size=6).filter(lambda t: t.strip().lower() not in _BOOL_WORDS),
        st.floats(min_value=2),
        st.lists(st.booleans(), min_size=1, max_size=2),
    ),
    "priority": st.integers(),  # not a field at all
}


@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('security-app') / 'tilewise.db'}"
    with TestClient(create_app(make_settings(url))) as client:
        yield client


@settings(FUZZ, max_examples=300)
@given(data=st.data(), field=st.sampled_from(sorted(BAD_FIELD_VALUES)))
def test_a_job_request_takes_validated_values_only(
    app_client: TestClient, data: st.DataObject, field: str
) -> None:
    """Each field of POST /v1/jobs given a value of the wrong type, out of range or not in its
    fixed list (op registry, dtypes, targets): a 422 naming that field, and no job."""
    value = data.draw(BAD_FIELD_VALUES[field], label=field)
    body = {**JOB, field: value}
    # json.dumps as Python writes it: NaN and Infinity too (the app's parser reads them)
    content = json.dumps(body).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    r = app_client.post("/v1/jobs", content=content, headers=headers)
    assert r.status_code == 422, (body, r.status_code, r.text)
    locs = [e["loc"] for e in r.json()["detail"]]
    assert any(loc[:2] == ["body", field] for loc in locs), (body, locs)
    assert app_client.get("/v1/jobs").json()["jobs"] == []


# ---------------------------------------------------------------------------------------------
# Body size limit on a real server


def _raw_request(base: str, head: bytes, body: bytes = b"", *, wait_s: float = 10.0) -> bytes:
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=wait_s) as sock:
        sock.sendall(head + body)
        answer = b""
        deadline = time.monotonic() + wait_s
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


def test_a_declared_huge_body_is_refused_before_it_is_sent(live: str) -> None:
    """Content-Length: 1 GB and no body: a 413 without a byte of the body sent, not a server
    waiting for a gigabyte (it would answer nothing before the client gives up)."""
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 1000000000\r\n\r\n"
    )
    started = time.monotonic()
    answer = _raw_request(live, head)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    record("security: a declared 1 GB body", answered_in_s=round(time.monotonic() - started, 3))


def test_a_chunked_body_past_the_limit_is_refused(live: str) -> None:
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"x" * 1024
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(16)) + b"0\r\n\r\n"
    answer = _raw_request(live, head, body)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # and the endpoint without a body limit of its own is covered too
    r = httpx.post(f"{live}/v1/jobs/1/cancel", content=b"x" * 5000, headers=AUTH, timeout=30)
    assert r.status_code == 413


# ---------------------------------------------------------------------------------------------
# CORS on a real server


def test_cors_is_closed_on_a_real_server(live: str) -> None:
    origin = {"Origin": "https://evil.example"}
    for r in (
        httpx.get(f"{live}/v1/ops", headers=origin, timeout=30),
        httpx.get(f"{live}/v1/tilings/swiglu?shape=T=4,I=4", headers=origin, timeout=30),
        httpx.post(f"{live}/v1/jobs", json=JOB, headers={**origin, **AUTH}, timeout=30),
        httpx.options(
            f"{live}/v1/jobs",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
            timeout=30,
        ),
    ):
        assert not any(h.lower().startswith("access-control-") for h in r.headers), r.headers


# ---------------------------------------------------------------------------------------------
# No secret in logs or output

PASSWORD = "pg-Secret-4711"


def _exercise(base: str) -> int:
    """Requests that make a server log: writes with good and bad tokens, 4xx, 404, reads."""
    sent = 0
    with httpx.Client(base_url=base, timeout=30) as client:
        for headers in (AUTH, {"Authorization": "Bearer wrong"}, {}):
            client.post("/v1/jobs", json=JOB, headers=headers)
            client.post("/v1/jobs", json={"op": "nope"}, headers=headers)
            client.post("/v1/jobs/999/cancel", headers=headers)
            sent += 3
        for path in (
            "/v1/jobs",
            "/v1/jobs/1",
            "/v1/jobs/999",
            "/v1/workers",
            "/healthz",
            "/metrics",
            "/v1/tables",
            "/v1/tilings/swiglu?shape=T=4,I=4",
            "/",
            "/workloads/0",
        ):
            client.get(path)
            sent += 1
    return sent


def _assert_no_secret(text: str, where: str) -> None:
    assert TOKEN not in text, f"the API token in {where}"
    assert PASSWORD not in text, f"the database password in {where}"


@pytest.mark.postgres
@pytest.mark.slow
def test_serve_and_its_workers_log_no_secret(pg_admin: Engine, tmp_path: Path) -> None:
    """`tilewise serve --workers 1` on a PostgreSQL URL with a password, with the token set:
    startup, every request's log line, a worker's log and the shutdown hold neither."""
    with pg_database(pg_admin, password=PASSWORD) as url:
        with tilewise_serve(tmp_path, db_url=url, token=TOKEN, workers=1) as served:
            sent = _exercise(served.url)
            _wait_for_worker(served)
        output = served.output()
    _assert_no_secret(output, "the output of tilewise serve")
    assert "***" in output  # the worker named its database, masked
    record(
        "security: no secret in serve logs",
        requests=sent,
        log_lines=len(output.splitlines()),
        secrets_seen=0,
    )


def _wait_for_worker(served: Served) -> None:
    deadline = time.monotonic() + 60
    while "serving target" not in served.output():
        assert time.monotonic() < deadline, served.output()
        time.sleep(0.2)


@pytest.mark.postgres
def test_requests_log_no_secret(pg_admin: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """In-process, every logger at DEBUG: the token and the password reach no log record."""
    caplog.set_level(logging.DEBUG)
    with (
        pg_database(pg_admin, password=PASSWORD) as url,
        TestClient(create_app(make_settings(url))) as client,
    ):
        _exercise_client(client)
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert caplog.records  # something was logged
    _assert_no_secret(text, "the log records")


def _exercise_client(client: TestClient) -> None:
    for headers in (AUTH, {"Authorization": "Bearer wrong"}):
        client.post("/v1/jobs", json=JOB, headers=headers)
        client.post("/v1/jobs", json={"op": "nope"}, headers=headers)
    for path in ("/v1/jobs", "/v1/workers", "/healthz", "/metrics", "/v1/tables"):
        client.get(path)


UNREACHABLE = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/none"
CLI_CASES = [
    ["db", "upgrade"],
    ["show", "scale_relu_dropout", "--shape", "N=64"],
    ["export", "scale_relu_dropout"],
    ["tune", "scale_relu_dropout", "--shape", "N=64", "--budget", "1"],
]


@pytest.mark.parametrize("args", CLI_CASES, ids=[" ".join(a[:2]) for a in CLI_CASES])
def test_cli_errors_mask_the_password(tmp_path: Path, args: list[str]) -> None:
    done = tilewise(*args, tmp_path=tmp_path, db=UNREACHABLE)
    assert done.returncode == 2, done.stderr
    _assert_no_secret(done.stdout + done.stderr, f"tilewise {' '.join(args)}")
    assert "postgres:***@127.0.0.1:1" in done.stderr


def test_a_mistyped_url_does_not_show_its_password(tmp_path: Path) -> None:
    typo = f"postgresql+psycopg//postgres:{PASSWORD}@127.0.0.1/none"  # no ':' after the scheme
    done = tilewise("db", "upgrade", tmp_path=tmp_path, db=typo)
    assert done.returncode == 2
    _assert_no_secret(done.stdout + done.stderr, "tilewise db upgrade")
