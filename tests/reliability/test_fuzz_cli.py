"""Bad input on the command line: every one ends with one line ``error: ...`` on stderr naming
the problem, exit code 2, and nothing written (no database, no build cache, no output file).

Hypothesis draws command lines with one bad field among valid ones (so the message can be
checked to name that field), or any mix where every outcome is fine as long as it is clean
(``show``: an error, as no database exists there; ``check``: a verdict or an error). The
commands run in-process through the real entry point (``tilewise.cli.main``, as the ``tilewise`` script does)
with stdout and stderr captured; a few run as real processes too. Terminal width 80: a long
error must not wrap into two lines for a script that greps it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.reliability._report import record
from tilewise import cli
from tilewise.cli.service import is_loopback
from tilewise.errors import InputError
from tilewise.kernels.ops import OPS, get_op
from tilewise.kernels.request import resolve_request
from tilewise.kernels.targets import list_targets, twin_target
from tilewise.settings import get_settings
from tilewise.types import DTYPES, MAX_DIM, Shape

pytestmark = pytest.mark.reliability

EXAMPLES = 80
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    # Shrinking a failure can take minutes here: report the first one found, as found.
    phases=[Phase.explicit, Phase.generate],
)

OP_NAMES = sorted(OPS)
TARGETS = [t.name for t in list_targets()]
MAX_BUDGET = 5000  # Settings().max_budget

# Text a user might type: anything but NUL (no argv holds one) and lone surrogates (a process
# gets them only from undecodable bytes; the subprocess tests send those).
CHAR = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
TEXT = st.text(CHAR, max_size=24)


def _not_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return True
    return False


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


class Cli:
    """Runs ``tilewise ARGS`` in-process in an empty directory tree that must stay empty."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.never = root / "never.db"
        self.cwd = root / "cwd"
        self.cwd.mkdir()
        self.env = {
            "HOME": str(root / "home"),
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_CACHE_HOME": str(root / "xdg-cache"),
            "TILEWISE_DB_URL": f"sqlite:///{root / 'data' / 'default.db'}",
            "TILEWISE_CACHE_DIR": str(root / "cache"),
            "TILEWISE_API_TOKEN": None,
            "TILEWISE_DEV_MODE": None,
            "COLUMNS": "80",
        }
        self.runner = CliRunner()
        self.seen: Counter[int] = Counter()

    def run(self, *args: str) -> Outcome:
        argv, cwd = sys.argv, Path.cwd()
        # `worker` and `serve` set up a process before they check their arguments: they block
        # SIGTERM and SIGINT (children inherit that: a `tilewise serve` started by a later test
        # ignored its SIGTERM) and configure logging. Put this process back as it was.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        root = logging.getLogger()
        logging_state = (list(root.handlers), root.level)
        sys.argv = ["tilewise", *args]
        os.chdir(self.cwd)  # relative paths (sqlite:///x.db) land in the watched tree
        try:
            with self.runner.isolation(env=self.env) as (stdout, stderr, _):
                try:
                    cli.main()
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                outcome = Outcome(
                    code, stdout.getvalue().decode(errors="replace"), stderr.getvalue().decode()
                )
        finally:
            sys.argv = argv
            os.chdir(cwd)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            root.handlers[:], root.level = logging_state
        self.seen[outcome.code] += 1
        self.assert_nothing_written(args)
        return outcome

    def assert_nothing_written(self, args: tuple[str, ...]) -> None:
        written = sorted(
            str(p.relative_to(self.root)) for p in self.root.rglob("*") if p != self.cwd
        )
        assert written == [], f"tilewise {' '.join(args)!r} wrote {written}"

    def assert_rejected(self, outcome: Outcome, args: tuple[str, ...], *words: str) -> None:
        """Exit 2 and one line ``error: ...`` naming the problem (one of ``words``)."""
        where = f"tilewise {list(args)!r}: {outcome}"
        assert outcome.code == 2, where
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), where
        assert "Traceback" not in outcome.stderr, where
        assert outcome.stdout == "", where
        if words:
            assert any(w.lower() in lines[0].lower() for w in words), (words, where)


@pytest.fixture(scope="module")
def tilewise(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    root = tmp_path_factory.mktemp("fuzz-cli")
    get_settings.cache_clear()  # the settings are read from the runner's environment
    runner = Cli(root)
    yield runner
    get_settings.cache_clear()
    record(
        "fuzz: command line (every command)",
        runs=sum(runner.seen.values()),
        exit_codes={str(k): v for k, v in sorted(runner.seen.items())},
        tracebacks=0,
        written=0,
    )


# ---------------------------------------------------------------------------------------------
# Strategies: valid fields, and one bad field with the words its error must contain


@st.composite
def valid_shape(draw: st.DrawFn, op: str) -> str:
    # Dims of 1..64, kept only when the op accepts them together: a conv's filter must fit its
    # padded image, which independent draws miss about half of the time.
    spec = get_op(op)
    values = {d: draw(st.integers(1, 64)) for d in spec.dims}
    try:
        spec.validate_shape(values)
    except InputError:
        assume(False)
    return ",".join(f"{d}={v}" for d, v in values.items())


@st.composite
def bad_shape(draw: st.DrawFn, op: str) -> tuple[str, tuple[str, ...]]:
    dims = get_op(op).dims
    values = {d: str(draw(st.integers(1, 64))) for d in dims}
    kind = draw(st.sampled_from(["junk", "value", "missing", "unknown", "too big"]))
    if kind == "junk":  # no NAME=VALUE in it at all
        text = draw(st.text(CHAR.filter(lambda c: c != "="), max_size=30))
        return text, ("shape",)
    if kind == "value":
        dim = draw(st.sampled_from(dims))
        values[dim] = draw(
            st.one_of(
                st.integers(max_value=0).map(str),
                st.integers(min_value=MAX_DIM + 1).map(str),
                st.just("9" * 5000),
                st.text(CHAR.filter(lambda c: c not in ",= "), max_size=12).filter(_not_int),
                st.floats(allow_nan=True).map(repr).filter(_not_int),
            )
        )
        return ",".join(f"{d}={v}" for d, v in values.items()), (dim,)
    if kind == "missing":
        dim = draw(st.sampled_from(dims))
        del values[dim]
        return ",".join(f"{d}={v}" for d, v in values.items()) or ",", (dim, "shape")
    if kind == "unknown":
        name = draw(
            st.text(CHAR.filter(lambda c: c not in ",= "), min_size=1, max_size=12).filter(
                lambda n: n not in dims
            )
        )
        values[name] = "4"
        return ",".join(f"{d}={v}" for d, v in values.items()), ("unknown dim", "not a dim name")
    # every dim at 2**22: a tensor above max_elements (2**28) wherever there are two dims
    if len(dims) == 1:
        return f"{dims[0]}=0", (dims[0],)
    return ",".join(f"{d}={1 << 22}" for d in dims), ("above the limit",)


BAD_OP = TEXT.filter(lambda t: t not in OPS and t != "replay")
BAD_DTYPE = TEXT.filter(lambda t: t not in DTYPES)
BAD_TARGET = TEXT.filter(lambda t: t.strip().lower() not in TARGETS)


@st.composite
def tune_case(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...]]:
    """``tune`` with exactly one bad field: it must never start tuning."""
    op = draw(st.sampled_from(OP_NAMES))
    spec = get_op(op)
    fields = {
        "shape": draw(valid_shape(op)),
        "dtype": draw(st.sampled_from(spec.dtypes)),
        "target": draw(st.sampled_from(TARGETS)),
        "budget": str(draw(st.integers(1, MAX_BUDGET))),
        "seconds": repr(draw(st.floats(0.001, 1e6))),
        "seed": str(draw(st.integers(0, 2**32 - 1))),
        "strategy": draw(st.sampled_from(["default", "tpe", "random"])),
    }
    bad = draw(st.sampled_from(["op", *fields]))
    words: tuple[str, ...]
    if bad == "op":
        op, words = draw(BAD_OP), ("unknown op",)
    elif bad == "shape":
        fields["shape"], words = draw(bad_shape(op))
    elif bad == "dtype":
        fields["dtype"], words = draw(BAD_DTYPE), ("unknown dtype",)
    elif bad == "target":
        fields["target"], words = draw(BAD_TARGET), ("unknown target",)
    elif bad == "budget":
        number = st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_BUDGET + 1))
        fields["budget"] = draw(st.one_of(number.map(str), TEXT.filter(_not_int)))
        words = ("budget",)
    elif bad == "seconds":
        fields["seconds"] = draw(
            st.one_of(
                st.floats(max_value=0).map(repr),
                st.sampled_from(["nan", "inf", "-inf", "NaN", "1e999"]),
                TEXT.filter(lambda t: _not_float(t)),
            )
        )
        words = ("seconds",)
    elif bad == "seed":
        number = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32))
        fields["seed"], words = draw(st.one_of(number.map(str), TEXT.filter(_not_int))), ("seed",)
    else:
        fields["strategy"] = draw(
            TEXT.filter(lambda t: t not in ("default", "tpe", "random", "gp"))
        )
        words = ("strategy",)
    args = [f"--{k}={v}" for k, v in fields.items()]
    return [*args, "--db", "NEVER", "--", op], words


def _not_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


def _with_db(args: list[str], tilewise: Cli) -> tuple[str, ...]:
    return tuple(f"sqlite:///{tilewise.never}" if a == "NEVER" else a for a in args)


@FUZZ
@given(case=tune_case())
def test_tune_rejects_each_bad_field(
    tilewise: Cli, case: tuple[list[str], tuple[str, ...]]
) -> None:
    args, words = case
    argv = ("tune", *_with_db(args, tilewise))
    tilewise.assert_rejected(tilewise.run(*argv), argv, *words)


@FUZZ
@given(
    op=st.one_of(st.sampled_from(OP_NAMES), BAD_OP),
    shape=st.one_of(st.sampled_from(["N=64", "M=8,N=8,K=8", "T=4,I=8"]), TEXT),
    dtype=st.one_of(st.sampled_from(DTYPES), BAD_DTYPE),
    target=st.one_of(st.sampled_from(TARGETS), BAD_TARGET),
    with_db=st.booleans(),
)
def test_show_answers_one_error_line_naming_the_field_or_the_missing_database(
    tilewise: Cli, op: str, shape: str, dtype: str, target: str, with_db: bool
) -> None:
    """No database exists here: a valid workload's answer is an error naming the SQLite file
    that is not there (never "not tuned", and the file is not created); a bad field's, an
    error."""
    argv: tuple[str, ...] = (f"--shape={shape}", f"--dtype={dtype}", f"--target={target}")
    database = tilewise.root / "data" / "default.db"
    if with_db:
        argv += ("--db", f"sqlite:///{tilewise.never}")
        database = tilewise.never
    argv = ("show", *argv, "--", op)
    outcome = tilewise.run(*argv)
    try:
        resolve_request(op, shape, dtype, target, max_elements=get_settings().max_elements)
    except InputError:
        tilewise.assert_rejected(outcome, argv)
    else:
        tilewise.assert_rejected(outcome, argv, f"(no file {database})")


# JSON values of any kind, as `--tiling` text.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(
    op=st.sampled_from(OP_NAMES),
    value=JSON,
    junk=st.sampled_from(["", "x", "[" * 5000, "{", '{"a": ' + "9" * 5000 + "}", "{'a': 1}"]),
)
def test_check_rejects_a_malformed_tiling(tilewise: Cli, op: str, value: object, junk: str) -> None:
    text = junk or json.dumps(value)
    argv = (
        "check",
        f"--shape={','.join(f'{d}=64' for d in get_op(op).dims)}",
        f"--tiling={text}",
        "--",
        op,
    )
    tilewise.assert_rejected(tilewise.run(*argv), argv, "tiling")


@FUZZ
@given(op=st.sampled_from(OP_NAMES), data=st.data())
def test_check_gives_a_verdict_for_any_integer_tiling(
    tilewise: Cli, op: str, data: st.DataObject
) -> None:
    """Every tunable present, any value (its domain's, zero, negative, large): within the
    workload's domains a verdict, outside them one error naming the first field outside (the
    op's rules and footprints assume values within, as a loaded table's are); never a crash.
    Values stop at 2**16, past the end of every domain."""
    spec = get_op(op)
    shape = Shape({d: data.draw(st.integers(1, 256), label=d) for d in spec.dims})
    try:
        spec.validate_shape(shape, max_elements=1 << 28)
    except InputError:
        assume(False)  # a bad shape is test_tune_rejects_each_bad_field's business
    tunables = spec.tunables(shape, "float32", twin_target())
    tiling = {
        t.name: data.draw(
            st.one_of(st.sampled_from(t.values), st.integers(-(2**31), 2**16)), label=t.name
        )
        for t in tunables
    }
    argv = ("check", f"--shape={shape.key()}", f"--tiling={json.dumps(tiling)}", "--", op)
    outcome = tilewise.run(*argv)
    outside = [t for t in tunables if not min(t.values) <= tiling[t.name] <= max(t.values)]
    if outside:
        first = outside[0].name
        tilewise.assert_rejected(outcome, argv, f"{first}={tiling[first]} is outside its domain")
        return
    where = f"{argv}: {outcome}"
    assert outcome.code in (0, 1), where
    assert outcome.stdout.startswith(f"valid: {outcome.code == 0}"), where
    assert outcome.stderr == "", where


@FUZZ
@given(
    op=st.one_of(st.sampled_from(OP_NAMES), BAD_OP),
    target=st.one_of(st.none(), st.sampled_from(TARGETS), BAD_TARGET),
    dtype=st.one_of(st.none(), st.sampled_from(DTYPES), BAD_DTYPE),
    fmt=st.one_of(st.sampled_from(["json", "header"]), TEXT),
    output=st.sampled_from(["-", "out.json", "no/such/dir/out.h", "."]),
)
def test_export_without_a_database_or_with_bad_names(
    tilewise: Cli, op: str, target: str | None, dtype: str | None, fmt: str, output: str
) -> None:
    """No database at the URL (a missing SQLite file is never created by export) or a bad
    name: one error line, and no output file."""
    argv: tuple[str, ...] = ("export", f"--format={fmt}", "--db", f"sqlite:///{tilewise.never}")
    argv += () if target is None else (f"--target={target}",)
    argv += () if dtype is None else (f"--dtype={dtype}",)
    argv += ("-o", output if output in ("-", ".") else str(tilewise.root / output), "--", op)
    tilewise.assert_rejected(tilewise.run(*argv), argv)


BAD_URL = st.one_of(
    TEXT.filter(lambda t: "://" not in t),  # not a URL at all
    st.from_regex(r"\A[a-z]{1,10}(\+[a-z]{1,8})?://[a-z]{0,8}\Z").filter(
        lambda u: not u.startswith(("sqlite", "postgres"))
    ),  # no such dialect or driver
    st.sampled_from(
        [
            "postgresql+psycopg://nobody@127.0.0.1:1/none",  # nothing listens there
            "postgresql+psycopg://nobody:pw@127.0.0.1:1/none",
            "sqlite:////dev/null/x.db",  # a directory that cannot exist
        ]
    ),
)


@FUZZ
@given(url=BAD_URL, command=st.sampled_from(["db upgrade", "show", "export"]))
def test_a_bad_database_url_is_one_error_line(tilewise: Cli, url: str, command: str) -> None:
    argv: tuple[str, ...] = (*command.split(), "--db", url)
    if command == "show":
        argv += ("--shape=N=64", "scale_relu_dropout")
    elif command == "export":
        argv += ("scale_relu_dropout",)
    outcome = tilewise.run(*argv)
    tilewise.assert_rejected(outcome, argv, "database", "url", "dialect")


def test_a_url_with_a_bad_port_is_one_error_line(tilewise: Cli) -> None:
    argv = ("db", "upgrade", "--db", "postgresql+psycopg://nobody@127.0.0.1:port/none")
    tilewise.assert_rejected(tilewise.run(*argv), argv, "database", "url")


@FUZZ
@given(
    host=TEXT.filter(lambda h: h.strip() != "" and not is_loopback(h)),
    port=st.one_of(
        st.just("8000"), st.integers(max_value=0).map(str), st.integers(min_value=65536).map(str)
    ),
)
def test_serve_refuses_a_public_address_without_a_token(
    tilewise: Cli, host: str, port: str
) -> None:
    """No API token: `serve` refuses any address but loopback before it opens the database (a
    bad port is refused first)."""
    argv = ("serve", f"--host={host}", f"--port={port}", "--workers", "0")
    outcome = tilewise.run(*argv)
    tilewise.assert_rejected(outcome, argv, "token" if port == "8000" else "--port")


@FUZZ
@given(
    target=st.one_of(BAD_TARGET, st.sampled_from(TARGETS)),
    device=st.one_of(st.none(), st.integers(max_value=-1), st.integers(min_value=2**31)),
)
def test_worker_rejects_a_bad_target_or_device(
    tilewise: Cli, target: str, device: int | None
) -> None:
    assume(device is not None or target.strip().lower() not in TARGETS)  # else it would run
    argv: tuple[str, ...] = ("worker", f"--target={target}", "--exit-when-idle")
    argv += () if device is None else (f"--device={device}",)
    argv += ("--db", f"sqlite:///{tilewise.never}")
    tilewise.assert_rejected(
        tilewise.run(*argv), argv, "--device" if device is not None else "unknown target"
    )


CSV_CELL = st.one_of(
    st.integers(-5, 5).map(str),
    st.sampled_from(["", "nan", "inf", "-inf", "1e999", "True", " 1", '"', "a,b"]),
    st.text(CHAR, max_size=6),
)


@st.composite
def recorded_space(draw: st.DrawFn) -> bytes:
    """A CSV as `tune replay --space` reads it, or something broken near it, or any bytes."""
    kind = draw(st.sampled_from(["csv", "csv", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "time_ms", ""]), min_size=1, max_size=4))
    rows = draw(st.lists(st.lists(CSV_CELL, min_size=1, max_size=5), max_size=5))
    text = "\n".join(",".join(r) for r in [names, *rows])
    return text.encode("utf-8", "surrogateescape")


@pytest.fixture(scope="module")
def spaces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spaces")  # outside the tree that must stay empty


def _not_json(name: str) -> None:
    raise AssertionError(f"--json printed {name}, which is not JSON")


@FUZZ
@given(content=recorded_space())
def test_replay_reads_any_space_file_cleanly(tilewise: Cli, spaces: Path, content: bytes) -> None:
    """`tune replay --space FILE --json`: a search over the recorded space (valid JSON out), or
    one error line naming the file."""
    space = spaces / "space.csv"
    space.write_bytes(content)
    argv = ("tune", "replay", "--space", str(space), "--budget", "3", "--seed", "0", "--json")
    outcome = tilewise.run(*argv)
    if outcome.code == 0:
        json.loads(outcome.stdout, parse_constant=_not_json)  # NaN and Infinity are not JSON
        assert outcome.stderr == "", outcome
    elif outcome.code == 1:  # searched, and nothing it proposed ran: said on one line
        assert json.loads(outcome.stdout, parse_constant=_not_json)["best"]["time_ms"] is None
        assert outcome.stderr.startswith("nothing ran successfully"), outcome
        assert outcome.stderr.count("\n") == 1, outcome
    else:
        tilewise.assert_rejected(outcome, argv, "replay")


SAFE_COMMANDS = ["ops", "show", "check", "records", "export", "frobnicate", ""]


@FUZZ
@given(
    command=st.sampled_from(SAFE_COMMANDS),
    words=st.lists(
        st.one_of(
            TEXT,
            st.sampled_from(["--shape", "--dtype", "--target", "--json", "--db", "-o", "--", "-"]),
        ),
        max_size=6,
    ),
)
def test_any_command_line_ends_cleanly(tilewise: Cli, command: str, words: list[str]) -> None:
    """Any words after a command that cannot tune or serve: exit 0 or 1 with output, or one
    error line with exit 2; never a traceback, never a file."""
    argv = (command, *words) if command else tuple(words)
    assume(argv and argv[0] not in ("tune", "serve", "worker", "db", "bench"))  # these do work
    outcome = tilewise.run(*argv)
    assert "Traceback" not in outcome.stderr + outcome.stdout, (argv, outcome)
    if outcome.code == 2 and outcome.stdout == "":
        tilewise.assert_rejected(outcome, argv)
    else:  # help (no arguments to a group), a listing, a check verdict
        assert outcome.code in (0, 1, 2) and outcome.stdout, (argv, outcome)


# ---------------------------------------------------------------------------------------------
# The same contract across a real process boundary: the installed entry point, stdout and stderr
# as a shell sees them, and arguments that are not valid UTF-8 (they reach Python as lone
# surrogates, which no in-process test can send through a terminal's encoding).


def _tilewise_process(root: Path, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEWISE_")}
    env.update(
        HOME=str(root / "home"),
        XDG_DATA_HOME=str(root / "data"),
        TILEWISE_CACHE_DIR=str(root / "cache"),
        COLUMNS="40",
    )
    cmd: list[str | bytes] = [sys.executable, "-m", "tilewise.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False, cwd=root)


PROCESS_CASES: list[tuple[list[str | bytes], str]] = [
    (["tune", b"\xff\xfe", "--shape", "N=64"], "unknown op"),
    (["tune", "scale_relu_dropout", "--shape", b"N=\xff"], "must be an integer"),
    (["tune", "scale_relu_dropout", "--shape", b"\xff=4"], "not a dim name"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--dtype", b"\xe9"], "unknown dtype"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--budget", "zero"], "--budget"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--seconds", "nan"], "seconds"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--seed", "-1"], "seed"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--strategy", "annealing"], "strategy"),
    (["tune", "--shape", "N=64"], "missing argument"),
    (["tune", "scale_relu_dropout", "--shape", "N=64", "--frobnicate"], "no such option"),
    (["check", "swiglu", "--shape", "T=4,I=4", "--tiling", "[" * 100_000], "tiling"),
    (["serve", "--host", "0.0.0.0", "--workers", "0"], "token"),
    (["worker", "--target", "a100", "--exit-when-idle"], "unknown target"),
]


@pytest.mark.parametrize(("args", "words"), PROCESS_CASES, ids=[w for _, w in PROCESS_CASES])
def test_a_real_process_prints_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str | bytes], words: str
) -> None:
    db = tmp_path / "never.db"
    done = _tilewise_process(tmp_path, *args, "--db", f"sqlite:///{db}")
    stderr = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert words.lower() in lines[0].lower(), stderr
    assert done.stdout == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "something was written"
