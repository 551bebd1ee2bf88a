"""What every ``tilewise`` command shares: the typer app, the consoles, the option types, and
the way bad input ends (one ``error:`` line on stderr, exit code 2, before anything is written).

Command modules import this module, never each other; :mod:`tilewise.cli` imports them all so
that their commands are registered on :data:`app`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperOption
from typer.models import CommandFunctionType

from tilewise import __version__
from tilewise.errors import InputError
from tilewise.settings import Settings, expand_db_url, get_settings

if TYPE_CHECKING:  # the kernels (numpy) are imported when a command runs, not at start-up
    from tilewise.kernels.request import WorkloadRequest


def _dtypes() -> Iterable[str]:
    from tilewise.types import DTYPES

    return DTYPES


def _targets() -> Iterable[str]:
    from tilewise.kernels.targets import target_names

    return target_names()


def _strategies() -> Iterable[str]:
    from tilewise.search import STRATEGIES

    return STRATEGIES


#: Option name -> the values it takes, listed by ``--help``. Read only when the help is shown:
#: the strategies' registry imports Optuna (and numpy), which no command may import at start-up
#: (``tilewise worker`` blocks its stop signals before any thread exists).
CHOICES: dict[str, Callable[[], Iterable[str]]] = {
    "dtype": _dtypes,
    "target": _targets,
    "strategy": _strategies,
}


class Command(TyperCommand):
    """A command whose ``--help`` lists the values of the options in :data:`CHOICES`.

    The options stay plain text: a wrong value is the command's to refuse, with a did-you-mean
    hint, in the one-line form of every bad input (click's own choice check would print its
    usage block instead)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.params:
            names = CHOICES.get(param.name or "")
            if names is not None and isinstance(param, TyperOption):
                listed = f"One of: {', '.join(names())}."
                if listed not in (param.help or ""):
                    param.help = f"{param.help} {listed}" if param.help else listed
        super().format_help(ctx, formatter)


class Typer(typer.Typer):
    """``typer.Typer`` whose commands are :class:`Command`s."""

    def command(
        self, *args: Any, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


app = Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Autotune tiling parameters of fused Ascend C kernels.",
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tilewise {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Autotune tiling parameters of fused Ascend C kernels."""


out = Console()
err = Console(stderr=True)

ShapeOpt = Annotated[str, typer.Option("--shape", help="Dims, e.g. M=1024,N=1024,K=1024.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="The element type.")]
TargetOpt = Annotated[
    str, typer.Option("--target", help="Where it runs: the CPU twin or an Ascend SoC profile.")
]
DbOpt = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL; default from settings.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
AnyToolchainOpt = Annotated[
    bool,
    typer.Option(
        "--any-toolchain",
        help="Also tilings measured with another toolchain than this host's (another compiler, "
        "twin headers, CANN or target profile): stale, left out by default.",
    ),
]

#: How an error line is printed: as is, unwrapped whatever the terminal's width.
ONE_LINE: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}

#: Samplers seed numpy's generators, which take 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1


def fail(message: str) -> NoReturn:
    """End the command: one line on stderr (scripts grep it), exit code 2."""
    err.print(f"error: {' '.join(message.split())}", **ONE_LINE)
    raise typer.Exit(2)


def settings_for(db: str | None) -> Settings:
    """The settings, with ``--db`` when given. An empty ``--db`` (say "$DB_URL" unset) is a bad
    URL, not the default database."""
    settings = get_settings()
    if db is None:
        return settings
    return settings.model_copy(update={"db_url": expand_db_url(db)})  # copies skip validators


def workload_request(
    op: str, shape: str, dtype: str, target: str, settings: Settings
) -> WorkloadRequest:
    """The checked (op, shape, dtype, target) of a command line; raises InputError."""
    from tilewise.kernels.request import resolve_request

    return resolve_request(op, shape, dtype, target, max_elements=settings.max_elements)


def check_seed(seed: int | None) -> None:
    """A seed numpy takes: a bad one failed deep in the first trial, after the database was
    written."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InputError(f"seed must be between 0 and {MAX_SEED}, got {seed}")


def output_path(output: str) -> Path | None:
    """The file ``-o`` names (None for ``-``, stdout), checked before anything is read: its
    directory exists and it is not one."""
    if output == "-":
        return None
    path = Path(output).expanduser()
    if not path.parent.is_dir():
        raise InputError(f"cannot write {path}: no directory {path.parent}")
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    return path


ManifestArg = Annotated[
    str, typer.Argument(help="A tuning manifest, YAML or JSON (see `tilewise.manifest`).")
]

#: The statuses of a manifest's workloads that count as not done: the exit code is 1.
FAILED = ("failed", "cancelled")


def results_table(title: str, rows: list[dict[str, Any]]) -> Any:
    """The summary of a manifest's workloads (``tune-set``, ``submit``): one row each, with
    what was asked, what happened and the stored result (:func:`report_failures` says why a
    workload failed). A dtype or target shared by every row goes in the title."""
    from rich import box
    from rich.table import Table

    shared = {
        name: values.pop() if len(values := {r[name] for r in rows}) == 1 else None
        for name in ("dtype", "target")
    }
    heading = " ".join([title, *(f"{v}" for v in shared.values() if v)])
    table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ["op", "shape", *(n for n, v in shared.items() if v is None)]
    for name in columns:
        longest = max(len(str(r[name])) for r in rows)
        table.add_column(name, overflow="fold", min_width=min(longest, 16))
    for name in ("weight", "budget", "status", "evals", "latency µs", "default µs", "speedup"):
        table.add_column(name, justify="left" if name == "status" else "right", no_wrap=True)
    for row in rows:
        status = row["status"]
        style = {"failed": "red", "cancelled": "red", "tuned": "dim"}.get(status, "")
        table.add_row(
            *(str(row[name]) for name in columns),
            f"{row['weight']:g}",
            "-" if row.get("budget") is None else str(row["budget"]),
            f"[{style}]{status}[/{style}]" if style else status,
            str(row.get("evaluations") or 0),
            _us(row.get("latency_us")),
            _us(row.get("default_latency_us")),
            "-" if row.get("speedup") is None else f"{row['speedup']:.2f}x",
        )
    return table


def print_table(table: Any, *, console: Console | None = None) -> None:
    """Print ``table`` on stdout (or ``console``): on a terminal at its width, into a file or
    pipe (a build's log) at the table's own width, not folded into 80 columns."""
    console = console or out
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update(max_width=1 << 12)).maximum
    Console(width=max(console.width, natural), highlight=False, stderr=console.stderr).print(table)


def report_failures(rows: list[dict[str, Any]]) -> int:
    """One ``error:`` line on stderr per workload that failed, naming it and why; how many."""
    failed = [r for r in rows if r["status"] in FAILED]
    for row in failed:
        # A cancelled job has no error of its own: "cancelled: cancelled" said nothing more.
        reason = " ".join(str(row.get("error") or "").split())
        err.print(
            f"error: {row['where']} {row['op']} {row['shape']} {row['dtype']} {row['target']}:"
            f" {row['status']}" + (f": {reason}" if reason else ""),
            **ONE_LINE,
        )
    return len(failed)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@contextmanager
def first_interrupt() -> Iterator[threading.Event]:
    """The first Ctrl-C or SIGTERM sets the event (the tune stops after the evaluation in
    flight, keeping every record and ending its claim); a second one interrupts at once. A
    SIGTERM's default, an exit on the spot, left the tiling in flight claimed, and the next
    tune of the workload waited for its record."""
    hit = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if hit.is_set():
            raise KeyboardInterrupt
        hit.set()
        again = "Ctrl-C" if signum == signal.SIGINT else "a second SIGTERM"
        err.print(f"stopping after the evaluation in flight ({again} to abort at once)")

    stopping = (signal.SIGINT, signal.SIGTERM)
    try:
        previous = {s: signal.signal(s, on_signal) for s in stopping}
    except ValueError:  # not the main thread: no handler of ours
        yield hit
        return
    try:
        yield hit
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
