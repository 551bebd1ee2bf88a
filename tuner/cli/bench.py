"""``tilewise bench``: the kernels and model blocks against numpy and PyTorch; the search
strategies on recorded spaces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tilewise.cli._common import Typer, app, check_seed, err, fail, out, output_path
from tilewise.errors import InputError, TilewiseError

DEFAULT_STRATEGIES = ("random", "tpe", "default")

bench_app = Typer(
    help="Benchmarks: kernels, model blocks, search strategies.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")


@bench_app.command("kernels")
def kernels(
    op: Annotated[
        str | None, typer.Option("--op", help="One op; default: every op at its benchmark shapes.")
    ] = None,
    budget: Annotated[
        int,
        typer.Option(help="Tune evaluations per shape (temporary database); 0 = no tuning."),
    ] = 40,  # tilewise.bench.kernels.DEFAULT_BUDGET, which CLI start-up must not import
    seed: Annotated[int, typer.Option(help="Sampler and input seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of rows.")] = False,
) -> None:
    """Time each op's twin kernel (default and tuned tiling) against numpy, torch and the
    roofline of this machine, fp32."""
    # Imported here, not at CLI load: numpy starts threads on import, and `tilewise worker`
    # must block its stop signals before any thread exists.
    from tilewise.bench import kernels as bench
    from tilewise.kernels.backends import create_backend
    from tilewise.settings import get_settings

    try:
        if budget < 0:
            raise InputError(f"budget must be 0 or more, got {budget}")
        check_seed(seed)
        todo = bench.cases(op)
        settings = get_settings()
        if not budget <= settings.max_budget:
            raise InputError(f"budget must be at most {settings.max_budget}, got {budget}")
        backend = create_backend("cpu-twin")
    except TilewiseError as exc:
        fail(str(exc))

    def log(message: str) -> None:
        err.print(f"  {message}", highlight=False, markup=False)

    with backend:
        rows, machine = bench.run(
            todo, backend=backend, settings=settings, budget=budget, seed=seed, log=log
        )
    if as_json:
        print(json.dumps(rows))
        return
    bench.print_report(rows, machine, budget, out.width)


@bench_app.command("models")
def models(
    tokens: Annotated[
        str, typer.Option("--tokens", help="LLaMA MLP token counts, comma-separated.")
    ] = "1,16,128,512,2048",
    rounds: Annotated[int, typer.Option(help="Interleaved timing rounds per block.")] = 5,
    budget: Annotated[
        int,
        typer.Option(help="Tune evaluations per kernel shape the blocks call; 0 = no tuning."),
    ] = 8,  # tilewise.bench.models.DEFAULT_BUDGET, which CLI start-up must not import
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Tune into (and take the tilings of) this database; default: a temporary "
            "SQLite file. A shape it already holds is not tuned again.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampler and weight seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Time the LLaMA MLP and Conv+BN+ReLU blocks on the tuned kernels against the same
    modules in PyTorch eager and under torch.compile, and the per-call overhead, fp32."""
    try:
        counts = _counts(tokens)
        if rounds < 1:
            raise InputError(f"rounds must be at least 1, got {rounds}")
        if budget < 0:
            raise InputError(f"budget must be 0 or more, got {budget}")
        check_seed(seed)
        try:
            from tilewise.bench import models as bench
        except ImportError as exc:
            raise InputError(
                f"tilewise bench models needs PyTorch (pip install 'tilewise[bench]'): {exc}"
            ) from None
        from tilewise.settings import get_settings

        settings = get_settings()
        if not budget <= settings.max_budget:
            raise InputError(f"budget must be at most {settings.max_budget}, got {budget}")

        def log(message: str) -> None:
            err.print(f"  {message}", highlight=False, markup=False, soft_wrap=True)

        report = bench.run(
            settings=settings,
            tokens=counts,
            rounds=rounds,
            budget=budget,
            db_url=db,
            seed=seed,
            log=log,
        )
    except TilewiseError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(report))
        return
    bench.print_report(report, out.width)


def _counts(text: str) -> list[int]:
    """``--tokens``: positive integers, comma-separated."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts):
        raise InputError(f"--tokens must be positive integers separated by commas, got {text!r}")
    if max(counts) > MAX_TOKENS:
        raise InputError(f"--tokens: at most {MAX_TOKENS} tokens, got {max(counts)}")
    return counts


#: The most tokens a models bench takes: its MLP's activations at 64k tokens take about 0.5 GB
#: per tensor.
MAX_TOKENS = 65536


@bench_app.command("search")
def search(
    space: Annotated[Path, typer.Option("--space", help="A recorded space (CSV).")],
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--strategy", help="Strategy to run (repeatable); default: random, tpe, default."
        ),
    ] = None,
    budget: Annotated[
        str,
        typer.Option(
            help="Evaluations per run, or auto: the benchmark's rule, max(200, ceil(E/5) + 50) "
            "with E random search's expected draws to 5% of the optimum."
        ),
    ] = "200",
    seeds: Annotated[int, typer.Option(help="Runs per strategy (seeds 0..N-1).")] = 10,
    first_seed: Annotated[
        int, typer.Option(help="Seed of the first run (seeds first..first+N-1).")
    ] = 0,
    warm_from: Annotated[
        Path | None,
        typer.Option(
            "--warm-from",
            help="Another recorded space of the op (a tuned shape): also run each strategy "
            "warm-started from its best configurations, as NAME+warm.",
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Draw best-so-far ratio against evaluations.")
    ] = None,
    stop_at_optimum: Annotated[
        bool,
        typer.Option(
            "--stop-at-optimum",
            help="End a run once it has found the optimum: the same figures, sooner "
            "(propose_s then leaves out the proposals it would have made after).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run each strategy --seeds times on a recorded space; report how fast each gets close."""
    from tilewise.search import _bench
    from tilewise.search._replay import ReplaySpace
    from tilewise.search._strategies import make_sampler

    names = list(strategy or DEFAULT_STRATEGIES)
    try:
        evaluations = None if budget == "auto" else _positive(budget, "--budget")
        if seeds < 1:
            raise InputError(f"seeds must be at least 1, got {seeds}")
        if first_seed < 0:
            raise InputError(f"first seed must be at least 0, got {first_seed}")
        for name in names:
            make_sampler(0, strategy=name)  # unknown names and missing toolkits fail up front
        if plot is not None:
            _check_plot_path(plot)
        replay = ReplaySpace(space)
        if evaluations is None:
            evaluations = _bench.rule_budget(replay)
        warm = _bench.warm_configs(replay, ReplaySpace(warm_from)) if warm_from is not None else []
    except TilewiseError as exc:
        fail(str(exc))

    def show(label: str, seed: int) -> None:
        err.print(f"  {label} seed {seed} done", highlight=False)

    results = _bench.run_strategies(
        replay,
        strategies=names,
        budget=evaluations,
        seeds=range(first_seed, first_seed + seeds),
        warm_start=warm,
        on_run=show,
        stop_at_optimum=stop_at_optimum,
    )
    report = _bench.summarize(replay, results, budget=evaluations)
    if warm_from is not None:
        report["warm_from"] = str(warm_from)
        report["warm_configs"] = warm
    if as_json:
        print(json.dumps(report), flush=True)
    else:
        out.print(_table(report))
    if plot is not None:  # after the report: a plot that fails loses no result
        try:
            _bench.plot(replay, results, budget=evaluations, path=plot)
        except OSError as exc:
            fail(f"cannot write the plot {plot}: {exc.strerror or exc}")


def _table(report: dict[str, Any]) -> Table:
    table = Table(
        title=f"{report['space']}: {report['configs']} configs, {report['valid']} valid, "
        f"optimum {report['optimum_ms']:.4g} ms, random search's expected draws to 5% "
        f"{report['random_draws_to_5pct']:g}, budget {report['budget']}, "
        f"{report['seeds']} seeds from {report['first_seed']}"
    )
    table.add_column("strategy")
    table.add_column("evals to 5%: median \\[q1, q3] missed", justify="right")
    table.add_column("evals to 1%", justify="right")
    entries = list(report["strategies"].values())
    checkpoints = list(entries[0]["ratio_at"]) if entries else []
    for n in checkpoints:
        table.add_column(f"ratio @{n}", justify="right")
    table.add_column("propose_s: median (late)", justify="right")
    table.add_column("s", justify="right")
    against = any("against_tpe" in entry for entry in entries)
    if against:
        table.add_column("evals to 5% / TPE's \\[90% interval]", justify="right")

    def evals(q: dict[str, float]) -> str:
        return f"{q['median']:g} [{q['q1']:g}, {q['q3']:g}] {q['missed']}"

    for name, entry in report["strategies"].items():
        ratios = [
            "-" if entry["ratio_at"][n] is None else f"{entry['ratio_at'][n]:.3f}"
            for n in checkpoints
        ]
        table.add_row(
            name,
            evals(entry["evals_to_5pct"]),
            evals(entry["evals_to_1pct"]),
            *ratios,
            _propose(entry["propose_s"]),
            f"{entry['seconds']:g}",
            *([_against(entry.get("against_tpe"))] if against else []),
        )
    return table


def _against(against: dict[str, Any] | None) -> str:
    if against is None:
        return "-"
    ratio, (low, high) = against["evals_to_5pct"]["ratio"], against["evals_to_5pct"]["interval90"]
    return f"{ratio:.2f} [{low:.2f}, {high:.2f}]"


def _propose(times: dict[str, float | None]) -> str:
    """The sampler's median seconds per proposal, and over each run's last tenth."""
    if times["median_s"] is None or times["late_s"] is None:
        return "-"
    return f"{times['median_s']:.3f} ({times['late_s']:.3f})"


def _positive(text: str, option: str) -> int:
    """A positive integer option given as text."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{option} must be a positive integer or auto, got {text!r}")
    return value


def _check_plot_path(path: Path) -> None:
    """Refuse a ``--plot`` file that cannot be written before any run (not after them)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    output_path(str(path))
    formats = FigureCanvasAgg.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        raise InputError(
            f"cannot plot to {path}: the name must end in one of "
            f"{', '.join('.' + f for f in sorted(formats))}"
        )
