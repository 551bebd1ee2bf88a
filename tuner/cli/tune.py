"""``tilewise tune``: tune one workload on a target and store the best tiling; with
``--predict``, rank tilings with the Ascend cost model instead (nothing measured); ``tilewise
tune replay`` searches a recorded space."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tilewise.cli._common import (
    ONE_LINE,
    DbOpt,
    DtypeOpt,
    JsonOpt,
    TargetOpt,
    app,
    check_seed,
    err,
    fail,
    first_interrupt,
    out,
    settings_for,
    workload_request,
)
from tilewise.errors import InputError, TilewiseError
from tilewise.types import Shape, Tiling


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
    settings = settings_for(db)
    if op == "replay":
        _tune_replay(space, budget=budget, seed=seed, strategy=strategy, as_json=as_json)
        return
    try:
        if shape is None:
            raise InputError("--shape is required, e.g. --shape M=1024,N=1024,K=1024")
        asked = workload_request(op, shape, dtype, target, settings)
        spec, parsed, dtype, profile = asked.spec, asked.shape, asked.dtype, asked.target
        if not 1 <= budget <= settings.max_budget:
            raise InputError(f"budget must be between 1 and {settings.max_budget}, got {budget}")
        # `not 0 < seconds < inf`: a NaN passed `seconds <= 0` and tuned with no time limit.
        if seconds is not None and not 0 < seconds < math.inf:
            raise InputError(f"seconds must be a positive number, got {seconds}")
        check_seed(seed)
        if not predict:
            # Checked before the database is opened: the Tuner would meet an unknown strategy
            # only after creating it.
            from tilewise.search._strategies import check_strategy

            check_strategy(strategy)
        if predict:
            _tune_predict(spec, parsed, dtype, profile, top=budget, seed=seed, as_json=as_json)
            return
        from tilewise import store
        from tilewise.kernels.backends import create_backend
        from tilewise.search import Budget, Tuner

        # The target's backend (on an Ascend target, CANN's: without it, the message names
        # ASCEND_HOME_PATH and set_env.sh) before the database is touched.
        store.check_persistent(settings.db_url)
        backend = create_backend(profile.backend, settings=settings, target=profile)
        try:
            db_handle = store.open_store(settings.db_url)
        except BaseException:
            backend.close()
            raise
    except TilewiseError as exc:
        fail(str(exc))

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
        with db_handle.session() as s:
            stored_before = store.get_tiling(
                s, workload_id=tuner.workload_id, toolchain=tuner.toolchain.id
            )
        earlier = sum(1 for o in tuner.seen.values() if o.status != "infeasible")
        if earlier and not as_json:
            err.print(
                f"continuing the study of this workload: {earlier} tilings evaluated by earlier "
                "runs are not measured again"
            )
        with Progress(*columns, console=err, transient=as_json) as bar, first_interrupt() as hit:
            task = bar.add_task(f"tuning {spec.name} {parsed}", total=budget, info="")

            def show(p):  # type: ignore[no-untyped-def]
                # The search's own single measurements; the winner is re-measured at the end.
                best = f"{p.best_us:.1f} us" if p.best_us is not None else "-"
                bar.update(
                    task,
                    completed=p.evaluations,
                    info=f"search best {best} | infeasible {p.infeasible} | failed {p.failed}",
                )

            result = tuner.run(
                Budget(budget, seconds), seed=seed, on_progress=show, should_stop=hit.is_set
            )
    db_handle.close()

    if result.stopped:
        if as_json:
            print(json.dumps(result.to_dict()))
        kept = "the stored winner is unchanged" if stored_before else "no winner is stored"
        err.print(
            f"interrupted: the {result.progress.evaluations} evaluations of this run are kept "
            f"(the next `tilewise tune` of this workload continues from them); nothing was "
            f"re-measured, {kept}"
        )
        raise typer.Exit(130)

    if as_json:
        print(json.dumps(result.to_dict()))
    if result.best is None:  # it ran, and found nothing: exit 1, as tune-set's failed workload
        why = result.why_no_best(seconds, "; see `tilewise show` and the records for reasons")
        err.print(f"error: {why}", **ONE_LINE)
        raise typer.Exit(1)
    if as_json:
        return
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
    propose = p.propose.summary()
    if propose["median_s"] is not None:
        out.print(
            f"proposing: {propose['median_s']:.3f} s median per proposal "
            f"(CPU {propose['cpu_median_s']:.3f} s), {propose['total_s']:.1f} s in all"
        )
    previous = Tiling(stored_before.tiling) if stored_before else None
    if previous is not None and previous != result.best.tiling:
        out.print(
            "the winner stored by an earlier run was replaced: the new one beat it side by side"
        )
    elif previous is not None and previous != (result.default and result.default.tiling):
        out.print(
            "the winner stored by an earlier run is kept: no new tiling beat it beyond the noise "
            "of the side-by-side re-measure"
        )
    elif result.default and result.best.tiling == result.default.tiling and p.evaluations > 1:
        out.print(
            "no tiling beat the default beyond the noise of the final side-by-side re-measure: "
            "the default tiling is kept"
        )
    if p.screened:
        out.print(
            f"the strategy proposed only tilings that pass the static check: it screened out "
            f"{p.screened_out:,} of {p.screened:,} candidates (UB/L1/L0 limits, rules) uncompiled"
        )


def _tune_predict(
    spec: Any, shape: Shape, dtype: str, profile: Any, *, top: int, seed: int | None, as_json: bool
) -> None:
    """Rank tilings by the cost model. Nothing is measured and nothing is stored."""
    from tilewise.kernels.backends import rank

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
        check_seed(seed)
        replay = ReplaySpace(space)
        sampler = make_sampler(seed, strategy=strategy, space=search_space_of(replay))
    except TilewiseError as exc:
        fail(str(exc))
    run = replay_search(replay, sampler, budget=budget)
    # The rows among the combinations of the columns' values: a strategy proposing from the
    # values (tpe, random) meets few rows of a sparse file, such as a short tune's records.
    combinations = math.prod(len(v) for v in replay.values.values())
    result = {
        "space": space,
        "strategy": strategy,
        "best": {"config": run.best_config, "time_ms": run.best_ms},
        "evaluations": replay.evaluations,
        "infeasible": replay.infeasible,
        "duplicates": run.duplicates,
        "configs": replay.configs,
        "combinations": combinations,
        "optimum_ms": replay.optimum_ms,
        "ratio": run.best_ms / replay.optimum_ms if run.best_ms is not None else None,
    }
    if as_json:
        print(json.dumps(result))
    if run.best_ms is None:
        why = (
            f"{replay.infeasible} proposals were no row of the file, which holds "
            f"{replay.configs} of the {combinations} combinations of its columns' values; "
            "the default strategy draws from its rows"
            if replay.infeasible
            else "every configuration evaluated failed"
        )
        err.print(
            f"nothing ran successfully in {replay.evaluations} evaluations ({why})", **ONE_LINE
        )
        raise typer.Exit(1)
    if as_json:
        return
    out.print(f"best {json.dumps(run.best_config)}: {run.best_ms:.4g} ms")
    out.print(
        f"{replay.evaluations} evaluations, {replay.infeasible} infeasible proposals; "
        f"the recorded optimum is {replay.optimum_ms:.4g} ms (ratio {result['ratio']:.3f})"
    )
