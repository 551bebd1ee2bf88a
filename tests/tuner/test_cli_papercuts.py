"""The command line's small things: the version, the choices in --help, did-you-mean hints for
wrong values, and `check` with a default or partial tiling and on the target (--run)."""

from __future__ import annotations

import json
import re
import socket
import statistics
from pathlib import Path

import pytest
from tests_support import tilewise

from tilewise import __version__
from tilewise.errors import close_matches, did_you_mean
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target, target_names
from tilewise.search import STRATEGIES
from tilewise.types import DTYPES, Shape


def test_version(tmp_path: Path) -> None:
    done = tilewise("--version", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tilewise {__version__}"


def _words(help_text: str) -> set[str]:
    """The words of a rich help page, its box drawing and punctuation left out."""
    return set(re.findall(r"[A-Za-z0-9][\w.-]*[A-Za-z0-9]", help_text))


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (["tune"], {"--dtype": DTYPES, "--target": target_names(), "--strategy": STRATEGIES}),
        (["check"], {"--dtype": DTYPES, "--target": target_names()}),
        (["show"], {"--dtype": DTYPES, "--target": target_names()}),
        (["worker"], {"--target": target_names(), "--strategy": STRATEGIES}),
        (["bench", "search"], {"--strategy": STRATEGIES}),
    ],
    ids=["tune", "check", "show", "worker", "bench search"],
)
def test_help_lists_the_values_an_option_takes(
    tmp_path: Path, command: list[str], options: dict[str, list[str]]
) -> None:
    done = tilewise(*command, "--help", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    words = _words(done.stdout)
    for option, names in options.items():
        assert option.lstrip("-") in words
        missing = [n for n in names if n not in words]
        assert missing == [], f"{command} --help does not list {missing} for {option}"


HINTS = [
    (["tune", "linear_add_gelo", "--shape", "M=4,N=4,K=4"], "(did you mean linear_add_gelu?)"),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--dtype", "fp16"],
        "(did you mean float16?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--dtype", "half"],
        "(did you mean float16?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "m=256,N=256,K=256"],
        "unknown dim m; dims are M, N, K (did you mean M=256,N=256,K=256?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "m=256,n=128,k=64"],
        "(did you mean M=256,N=128,K=64?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "256x128x64"],
        "got '256x128x64' (did you mean M=256,N=128,K=64?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "256x128"],
        "linear_add_gelu's dims go by name: M=...,N=...,K=...",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--target", "cpu_twin"],
        "(did you mean cpu-twin?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--target", "Ascend910B"],
        "(did you mean ascend910b1, ascend910b2, ascend910b3 or ascend910b4?)",
    ),
    (
        ["tune", "linear_add_gelu", "--shape", "M=4,N=4,K=4", "--strategy", "tpee"],
        "(did you mean tpe?)",
    ),
    (["worker", "--strategy", "tpee", "--exit-when-idle"], "(did you mean tpe?)"),
    (
        ["show", "swiglu", "--shape", "t=4,i=8"],
        "(did you mean T=4,I=8?)",
    ),
    (
        ["check", "swiglu", "--shape", "T=4,I=8", "--tiling", '{"tilelength": 64}'],
        "swiglu has no field 'tilelength' (did you mean tileLength?)",
    ),
]


@pytest.mark.parametrize(("args", "hint"), HINTS, ids=[" ".join(a[1:]) for a, _ in HINTS])
def test_a_wrong_value_gets_a_did_you_mean_hint(tmp_path: Path, args: list[str], hint: str) -> None:
    db = tmp_path / "never.db"
    done = tilewise(*args, tmp_path=tmp_path, db=f"sqlite:///{db}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert hint in lines[0], lines[0]
    assert not db.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("path", ["tuned.db", "/srv/tilewise/tuned.sqlite", "data/x"])
def test_a_bare_file_path_as_db_gets_the_sqlite_url_to_use(tmp_path: Path, path: str) -> None:
    done = tilewise("show", "swiglu", "--shape", "T=4,I=8", tmp_path=tmp_path, db=path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: not a database URL"), done.stderr
    assert f"did you mean sqlite:///{path}?" in lines[0], lines[0]


def test_no_hint_when_nothing_is_close() -> None:
    assert close_matches("matmul", ["linear_add_gelu", "swiglu"]) == []
    assert did_you_mean("bf16", DTYPES) == ""
    assert did_you_mean(None, DTYPES) == ""
    with pytest.raises(Exception, match=r"unknown target 'a100'; known") as caught:
        get_target("a100")
    assert "did you mean" not in str(caught.value)


def _check(tmp_path: Path, *args: str) -> tuple[int, dict[str, object]]:
    done = tilewise("check", *args, "--json", tmp_path=tmp_path)
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def test_check_default_is_the_ops_default_tiling_for_the_shape(tmp_path: Path) -> None:
    spec, shape = get_op("linear_add_gelu"), Shape({"M": 96, "N": 160, "K": 64})
    default = spec.default_tiling(shape, "float32", get_target("cpu-twin"))
    code, result = _check(
        tmp_path, "linear_add_gelu", "--shape", shape.key(), "--tiling", "default"
    )
    assert code == 0 and result["valid"] is True
    assert result["tiling"] == dict(default)
    assert result["from_default"] == {}


def test_check_completes_a_partial_tiling_from_the_default_and_says_so(tmp_path: Path) -> None:
    spec, shape = get_op("linear_add_gelu"), Shape({"M": 96, "N": 160, "K": 64})
    default = dict(spec.default_tiling(shape, "float32", get_target("cpu-twin")))
    given = {"baseM": 16, "baseN": 16}
    assert any(default[k] != v for k, v in given.items())  # else the test shows nothing
    args = ("linear_add_gelu", "--shape", shape.key(), "--tiling", json.dumps(given))
    code, result = _check(tmp_path, *args)
    assert result["tiling"] == {**default, **given}
    assert result["from_default"] == {k: v for k, v in default.items() if k not in given}
    assert code == (0 if result["valid"] else 1)

    text = tilewise("check", *args, tmp_path=tmp_path)
    assert text.stdout.startswith(f"valid: {result['valid']}")
    filled = ", ".join(f"{k}={v}" for k, v in result["from_default"].items())
    assert f"from the default tiling for this shape: {filled}" in text.stdout


def test_check_rejects_an_empty_tiling(tmp_path: Path) -> None:
    done = tilewise("check", "swiglu", "--shape", "T=4,I=8", "--tiling", "{}", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "sets no field" in done.stderr and "`default`" in done.stderr


def test_check_run_builds_verifies_and_times_the_tiling(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    tiling = json.dumps({"tileLength": 256})
    done = tilewise(
        "check", "swiglu", "--shape", "T=16,I=512", "--tiling", tiling, "--run", "--json",
        tmp_path=tmp_path, db=f"sqlite:///{db}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["run"]
    assert run["status"] == "ok" and run["stage"] == "run" and run["error"] is None
    samples = run["samples_us"]
    assert 1 <= len(samples) <= 7  # the settings' repeats (7), fewer past max_measure_s
    assert run["latency_us"] == pytest.approx(statistics.median(samples))
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [0, 0, 0]
    assert run["spread"] == pytest.approx((q[2] - q[0]) / statistics.median(samples))
    assert run["max_error"] is not None and run["max_error"] <= 1e-4
    assert not db.exists()  # a check records nothing
    assert (tmp_path / "cache").exists()  # the build went through the tuner's build cache

    text = tilewise(
        "check", "swiglu", "--shape", "T=16,I=512", "--tiling", tiling, "--run",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "run on cpu-twin: ok, output matches the reference" in text.stdout
    assert re.search(r"latency: median [\d.]+ us over \d+ runs, spread [\d.]+%", text.stdout)


def test_check_run_does_not_build_an_invalid_tiling(tmp_path: Path) -> None:
    too_big = json.dumps({"tileLength": 16384, "bufferNum": 2})  # the domain's end: past the UB
    done = tilewise(
        "check", "swiglu", "--shape", "T=16,I=512", "--tiling", too_big, "--run", "--json",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["valid"] is False and result["run"] is None
    assert not (tmp_path / "cache").exists()


def test_no_help_text_holds_what_rich_would_take_for_markup() -> None:
    # Rich renders help text as markup: "[default: 5]" vanished from --within's help.
    import click
    import typer.main

    from tilewise.cli import app

    def commands(command: click.Command) -> list[click.Command]:
        found = [command]
        for sub in getattr(command, "commands", {}).values():
            found += commands(sub)
        return found

    texts = [
        (f"{c.name} {getattr(p, 'name', '')}", text)
        for c in commands(typer.main.get_command(app))
        for p in [None, *c.params]
        for text in [c.help if p is None else getattr(p, "help", None)]
        if text
    ]
    assert len(texts) > 100
    assert [(where, t) for where, t in texts if re.search(r"\[[a-z/]", t)] == []


@pytest.mark.parametrize(
    "args",
    [
        ["tune", "swiglu", "--shape", "T=4,I=64", "--budget", "2"],
        ["tune-set", str(Path(__file__).parents[2] / "examples" / "manifest.yaml")],
        ["db", "upgrade"],
        ["serve", "--workers", "0", "--port", "1"],
        ["worker", "--exit-when-idle"],
    ],
    ids=["tune", "tune-set", "db-upgrade", "serve", "worker"],
)
def test_an_in_memory_database_is_refused_where_results_must_outlive_the_command(
    tmp_path: Path, args: list[str]
) -> None:
    done = tilewise(*args, tmp_path=tmp_path, db="sqlite://")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: database sqlite:// is an in-memory SQLite database, gone when this command "
        "ends: name a file (sqlite:///path/to/tilewise.db) or a server"
    )


def test_a_sqlite_file_under_the_home_directory_is_found_there(tmp_path: Path) -> None:
    args = ("tune", "scale_relu_dropout", "--shape", "N=4096", "--budget", "1")
    done = tilewise(*args, tmp_path=tmp_path, db="sqlite:///~/tuned/tw.db")  # HOME=tmp_path
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tuned" / "tw.db").is_file()
    shown = tilewise("show", "scale_relu_dropout", "--shape", "N=4096",
                     tmp_path=tmp_path, db="sqlite:///~/tuned/tw.db")  # fmt: skip
    assert shown.returncode == 0, shown.stderr


@pytest.mark.parametrize("command", ["show", "tune"])
def test_a_directory_named_as_the_database_file_is_named_so(tmp_path: Path, command: str) -> None:
    args = (command, "scale_relu_dropout", "--shape", "N=4096")
    done = tilewise(*args, tmp_path=tmp_path, db=f"sqlite:///{tmp_path}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(f"({tmp_path} is a directory)")


def test_tune_adds_no_tables_to_another_programs_sqlite_file(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    url = f"sqlite:///{other}"
    done = tilewise("tune", "scale_relu_dropout", "--shape", "N=4096", "--budget", "1",
                    tmp_path=tmp_path, db=url)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "holds tables of other software (invoices) and no tilewise schema" in done.stderr
    with sqlite3.connect(other) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"invoices"}
    upgraded = tilewise("db", "upgrade", tmp_path=tmp_path, db=url)  # on purpose
    assert upgraded.returncode == 0, upgraded.stderr
    again = tilewise("tune", "scale_relu_dropout", "--shape", "N=4096", "--budget", "1",
                     tmp_path=tmp_path, db=url)  # fmt: skip
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(
    ("token", "cure"),
    [
        (None, "set TILEWISE_API_TOKEN to require one"),
        ("secret", "unset TILEWISE_DEV_MODE to require the token set"),
    ],
)
def test_serve_in_dev_mode_says_what_would_require_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str | None, cure: str
) -> None:
    """With a token set, dev mode is TILEWISE_DEV_MODE's: setting the token is no cure."""
    monkeypatch.setenv("TILEWISE_DEV_MODE", "1")
    if token is None:
        monkeypatch.delenv("TILEWISE_API_TOKEN", raising=False)
    else:
        monkeypatch.setenv("TILEWISE_API_TOKEN", token)
    with socket.socket() as taken:  # the port is taken: serve says its piece, then fails
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = tilewise("serve", "--workers", "0", "--port", port, tmp_path=tmp_path)
    assert done.returncode != 0
    [said] = [line for line in done.stderr.splitlines() if line.startswith("dev mode:")]
    assert said.endswith(cure), done.stderr
