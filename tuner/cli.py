"""The ``tilewise`` command.

Bad input (an unknown op, dim, dtype or target, a malformed shape, a budget below one, an
unreachable database) ends with one line on stderr naming the problem and exit code 2, before
anything is written.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.exceptions import TyperException

from tilewise.errors import InputError, TilewiseError
from tilewise.settings import Settings, get_settings
from tilewise.types import Shape

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Autotune tiling parameters of fused Ascend C kernels.",
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")

out = Console()
err = Console(stderr=True)

ShapeOpt = Annotated[str, typer.Option("--shape", help="Dims, e.g. M=1024,N=1024,K=1024.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32 or float16.")]
TargetOpt = Annotated[str, typer.Option("--target", help="cpu-twin or an Ascend SoC profile.")]
DbOpt = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL; default from settings.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


#: How an error line is printed: as is, unwrapped whatever the terminal's width.
_ONE_LINE: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}


def _fail(message: str) -> NoReturn:
    # One line, whatever the cause printed: scripts grep it.
    err.print(f"error: {' '.join(message.split())}", **_ONE_LINE)
    raise typer.Exit(2)


def _settings(db: str | None) -> Settings:
    settings = get_settings()
    # `is not None`: an empty --db (say "$DB_URL" unset) is a bad URL, not the default database
    # (`db upgrade --db ""` migrated the default SQLite file; found by the CLI fuzz test).
    return settings.model_copy(update={"db_url": db}) if db is not None else settings


def _workload_inputs(op: str, shape: str, dtype: str, target: str, settings: Settings):  # type: ignore[no-untyped-def]
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    spec = get_op(op)
    parsed = spec.validate_shape(Shape.parse(shape), max_elements=settings.max_elements)
    return spec, parsed, spec.validate_dtype(dtype), get_target(target)


@app.command()
def ops(as_json: JsonOpt = False) -> None:
    """List the ops with their dims, dtypes and tunables."""
    from tilewise.kernels.ops import list_ops
    from tilewise.kernels.targets import twin_target

    target = twin_target()
    rows: list[dict[str, Any]] = []
    for spec in list_ops():
        unit = Shape({d: 1024 for d in spec.dims})
        tunables = spec.tunables(unit, spec.dtypes[0], target)
        rows.append(
            {
                "op": spec.name,
                "summary": spec.summary,
                "dims": list(spec.dims),
                "dtypes": list(spec.dtypes),
                "tunables": [t.to_dict() for t in tunables],
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("op", "dims", "dtypes", "tunables (compile-time marked *)", title="tilewise ops")
    for row in rows:
        names = ", ".join(t["name"] + ("*" if t["compile_time"] else "") for t in row["tunables"])
        table.add_row(row["op"], ",".join(row["dims"]), ",".join(row["dtypes"]), names)
    out.print(table)


@app.command()
def tune(
    op: Annotated[str, typer.Argument(help="Op name, see `tilewise ops`, or `replay`.")],
    shape: Annotated[
        str | None, typer.Option("--shape", help="Dims, e.g. M=1024,N=1024,K=1024.")
    ] = None,
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    budget: Annotated[int, typer.Option(help="Measured evaluations.")] = 40,
    seconds: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    strategy: Annotated[str, typer.Option(help="Search strategy.")] = "default",
    space: Annotated[
        str | None, typer.Option("--space", help="With `replay`: a recorded space (CSV).")
    ] = None,
    predict: Annotated[
        bool,
        typer.Option("--predict", help="Rank tilings with the Ascend cost model (no NPU)."),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tune OP for one shape; store and print the best tiling and its speedup.

    `tilewise tune replay --space FILE.csv` searches a recorded space instead (nothing stored).
    """
    settings = _settings(db)
    if op == "replay":
        _tune_replay(space, budget=budget, seed=seed, strategy=strategy, as_json=as_json)
        return
    try:
        if shape is None:
            raise InputError("--shape is required, e.g. --shape M=1024,N=1024,K=1024")
        spec, parsed, dtype, profile = _workload_inputs(op, shape, dtype, target, settings)
        if not 1 <= budget <= settings.max_budget:
            raise InputError(f"budget must be between 1 and {settings.max_budget}, got {budget}")
        # `not 0 < seconds < inf`: a NaN passed `seconds <= 0` and tuned with no time limit.
        if seconds is not None and not 0 < seconds < math.inf:
            raise InputError(f"seconds must be a positive number, got {seconds}")
        _check_seed(seed)
        if not predict:
            # Checked before the database is opened: the Tuner met an unknown strategy only
            # after creating it (found by the CLI fuzz test).
            from tilewise.search._strategies import STRATEGIES

            if strategy not in STRATEGIES:
                raise InputError(
                    f"unknown strategy {strategy!r}; known: {', '.join(sorted(STRATEGIES))}"
                )
        if predict:
            _tune_predict(spec, parsed, dtype, profile, top=budget, seed=seed, as_json=as_json)
            return
        if profile.backend != "cpu-twin":
            raise InputError(
                f"target {profile.name} needs the ascend backend, which is not available in this "
                "build; tune on cpu-twin (its on-chip sizes are those of Ascend910B1)"
            )
        from tilewise import store
        from tilewise.kernels.backends import create_backend
        from tilewise.search import Budget, Tuner

        db_handle = store.open_store(settings.db_url)
        backend = create_backend(profile.backend)
    except TilewiseError as exc:
        _fail(str(exc))

    with backend:
        tuner = Tuner(
            spec=spec,
            shape=parsed,
            dtype=dtype,
            target=profile,
            backend=backend,
            db=db_handle,
            settings=settings,
            strategy=strategy,
        )
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=err, transient=as_json) as bar:
            task = bar.add_task(f"tuning {spec.name} {parsed}", total=budget, info="")

            def show(p):  # type: ignore[no-untyped-def]
                best = f"{p.best_us:.1f} us" if p.best_us is not None else "-"
                bar.update(
                    task,
                    completed=p.evaluations,
                    info=f"best {best} | infeasible {p.infeasible} | failed {p.failed}",
                )

            result = tuner.run(Budget(budget, seconds), seed=seed, on_progress=show)
    db_handle.close()

    if as_json:
        print(json.dumps(result.to_dict()))
        return
    if result.best is None:
        _fail("no tiling ran successfully; see `tilewise show` and the records for reasons")
    table = Table(title=f"{spec.name} {parsed} {dtype} on {profile.name}")
    table.add_column("")
    table.add_column("tiling")
    table.add_column("latency", justify="right")
    table.add_row("best", json.dumps(dict(result.best.tiling)), f"{result.best.latency_us:.1f} us")
    if result.default:
        table.add_row(
            "default",
            json.dumps(dict(result.default.tiling)),
            f"{result.default.latency_us:.1f} us",
        )
    out.print(table)
    p = result.progress
    speed = f"{result.speedup:.2f}x" if result.speedup else "n/a"
    out.print(
        f"speedup over the default tiling: [bold]{speed}[/bold]  |  {p.evaluations} evaluations, "
        f"{p.rejected_static} rejected before compiling, {p.rejected_build} after building, "
        f"{p.failed} failed, {result.seconds:.1f} s"
    )
    if result.default and result.best.tiling == result.default.tiling and p.evaluations > 1:
        out.print(
            "no tiling beat the default beyond the noise of the final side-by-side re-measure: "
            "the default tiling is kept"
        )
    if p.screened:
        out.print(
            f"the strategy proposed only tilings that pass the static check: it screened out "
            f"{p.screened_out:,} of {p.screened:,} candidates (UB/L1/L0 limits, rules) uncompiled"
        )


#: Samplers seed numpy's generators, which take 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1


def _check_seed(seed: int | None) -> None:
    # numpy raised a ValueError deep in the first trial (a traceback after the database was
    # written; found by the CLI fuzz test).
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InputError(f"seed must be between 0 and {MAX_SEED}, got {seed}")


def _tune_predict(
    spec: Any, shape: Shape, dtype: str, profile: Any, *, top: int, seed: int | None, as_json: bool
) -> None:
    """Rank tilings by the cost model. Nothing is measured and nothing is stored."""
    from tilewise.kernels.backends._ascend.cost_model import rank

    if profile.backend != "ascend":
        raise InputError("--predict models Ascend targets; pick one, e.g. --target ascend910b1")
    ranked = rank(spec, shape, dtype, profile, seed=seed)
    default = spec.default_tiling(shape, dtype, profile)
    default_us = next(p.total_us for t, p in ranked if t == default)
    rows = [
        {"rank": i + 1, "tiling": dict(t), **p.to_dict(), "default": t == default}
        for i, (t, p) in enumerate(ranked[:top])
    ]
    result = {
        "workload": {"op": spec.name, "target": profile.name, "dtype": dtype, "shape": dict(shape)},
        "label": "predicted by the Ascend cost model; nothing was measured",
        "candidates": len(ranked),
        "default": {"tiling": dict(default), "predicted_us": round(default_us, 3)},
        "best": rows[0],
        "predicted_speedup": round(default_us / rows[0]["predicted_us"], 3),
        "ranking": rows,
    }
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"{spec.name} {shape} {dtype} on {profile.name} — PREDICTED, not measured")
    for column in ("rank", "predicted us", "bound", "tiling"):
        table.add_column(column)
    for row in rows:
        mark = " (default)" if row["default"] else ""
        table.add_row(
            str(row["rank"]),
            f"{row['predicted_us']:.1f}",
            str(row["bound"]),
            json.dumps(row["tiling"]) + mark,
        )
    out.print(table)
    out.print(
        f"default tiling: {default_us:.1f} us predicted; best predicted speedup "
        f"{result['predicted_speedup']:.2f}x over {len(ranked)} valid candidates"
    )


def _tune_replay(
    space: str | None, *, budget: int, seed: int | None, strategy: str, as_json: bool
) -> None:
    from tilewise.search._bench import search_space_of
    from tilewise.search._replay import ReplaySpace, replay_search
    from tilewise.search._strategies import make_sampler

    try:
        if space is None:
            raise InputError("replay needs --space FILE.csv, a recorded space")
        if budget < 1:
            raise InputError(f"budget must be at least 1, got {budget}")
        _check_seed(seed)
        replay = ReplaySpace(space)
        sampler = make_sampler(seed, strategy=strategy, space=search_space_of(replay))
    except TilewiseError as exc:
        _fail(str(exc))
    run = replay_search(replay, sampler, budget=budget)
    result = {
        "space": space,
        "strategy": strategy,
        "best": {"config": run.best_config, "time_ms": run.best_ms},
        "evaluations": replay.evaluations,
        "infeasible": replay.infeasible,
        "duplicates": run.duplicates,
        "optimum_ms": replay.optimum_ms,
        "ratio": run.best_ms / replay.optimum_ms if run.best_ms is not None else None,
    }
    if as_json:
        print(json.dumps(result))
        return
    if run.best_ms is None:
        _fail(f"no configuration of {space} ran successfully in {replay.evaluations} evaluations")
    out.print(f"best {json.dumps(run.best_config)}: {run.best_ms:.4g} ms")
    out.print(
        f"{replay.evaluations} evaluations, {replay.infeasible} infeasible proposals; "
        f"the recorded optimum is {replay.optimum_ms:.4g} ms (ratio {result['ratio']:.3f})"
    )


@app.command()
def show(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the stored best tiling of a workload."""
    from tilewise import store
    from tilewise.types import Workload

    settings = _settings(db)
    try:
        spec, parsed, dtype, profile = _workload_inputs(op, shape, dtype, target, settings)
        workload = Workload(spec.name, spec.version, profile.name, dtype, parsed)
        best = None
        if not _missing_sqlite_file(settings.db_url):  # no database yet: nothing is tuned
            db_handle = store.open_store(settings.db_url, create=False)
            with db_handle.session() as s:
                row = store.find_workload(s, key=workload.key)
                best = store.get_tiling(s, workload_id=row.id) if row else None
            db_handle.close()
    except TilewiseError as exc:
        _fail(str(exc))
    if best is None:
        if as_json:
            print(json.dumps({"workload": workload.to_dict(), "tuned": False}))
        else:
            out.print(
                f"{spec.name} {parsed} {dtype} on {profile.name}: not tuned "
                f"(run `tilewise tune {spec.name} --shape {parsed.key()}`)"
            )
        raise typer.Exit(1)
    result = {
        "workload": workload.to_dict(),
        "tuned": True,
        "tiling": dict(best.tiling),
        "latency_us": best.latency_us,
        "default_latency_us": best.default_latency_us,
        "speedup": best.speedup,
        "evaluations": best.evaluations,
    }
    if as_json:
        print(json.dumps(result))
    else:
        speed = f"{best.speedup:.2f}x" if best.speedup else "n/a"
        out.print(
            f"{spec.name} {parsed} {dtype} on {profile.name}: {json.dumps(dict(best.tiling))}"
        )
        out.print(
            f"latency {best.latency_us:.1f} us, speedup over default {speed}, "
            f"{best.evaluations} evaluations"
        )


def _missing_sqlite_file(url: str) -> bool:
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return False  # not a URL at all: opening it says so (a traceback here before)
    database = parsed.database or ""
    return (
        parsed.get_backend_name() == "sqlite"
        and database not in ("", ":memory:")
        and not Path(database).exists()
    )


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Migrate the database schema to the newest revision."""
    from tilewise import store

    settings = _settings(db)
    try:
        store.migrate(settings.db_url)
    except TilewiseError as exc:
        _fail(str(exc))
    out.print("database is at the newest revision")


def _register_commands() -> None:
    # Command groups live in their own modules so each stays small; they share `app`.
    from tilewise import _cli_bench, _cli_check, _cli_export, _cli_service

    _cli_bench.register(app)
    _cli_check.register(app)
    _cli_export.register(app)
    _cli_service.register(app)


_register_commands()


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(2)  # `tilewise` alone: typer printed the help already
        # A malformed command line (an unknown command or option, a value of the wrong type, a
        # missing argument) is bad input like any other: one line and exit code 2, not click's
        # usage block and framed message (found by the CLI fuzz test).
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        err.print(f"error: {' '.join(exc.format_message().split())}{hint}", **_ONE_LINE)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted", highlight=False)
        sys.exit(1)
    except TilewiseError as exc:  # anything not caught closer to its cause
        err.print(f"error: {' '.join(str(exc).split())}", **_ONE_LINE)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
