"""``tilewise tune-set``: tune every workload of a manifest here, one after the other.

Workloads tuned already are skipped (unless ``--force``); the others are tuned heaviest weight
first, each with its budget (:mod:`tilewise.manifest`), and stored as ``tilewise tune`` stores
them. A workload that fails (no tiling ran, its target's backend is missing) is reported with
its reason and the others go on; the exit code is then 1. A first Ctrl-C (or SIGTERM) stops
after the evaluation in flight (as ``tilewise tune`` does), the summary says what was tuned
and what was not, and the exit code is 130; a second one stops at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tilewise.cli._common import (
    DbOpt,
    JsonOpt,
    ManifestArg,
    app,
    check_seed,
    err,
    fail,
    first_interrupt,
    out,
    print_table,
    report_failures,
    results_table,
    settings_for,
)
from tilewise.errors import TilewiseError

if TYPE_CHECKING:
    from tilewise.kernels.backends import Backend
    from tilewise.manifest import ManifestEntry
    from tilewise.settings import Settings
    from tilewise.store import Store


@dataclass
class _Row:
    """One workload of the manifest: what was asked, and what became of it."""

    entry: ManifestEntry
    budget: int | None = None
    status: str = "queued"  # tuned (already), queued, succeeded, failed, cancelled
    evaluations: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        w = self.entry.workload
        return {
            "where": self.entry.where,
            "op": w.op,
            "dtype": w.dtype,
            "target": w.target,
            "shape": w.shape.key(),
            "key": w.key,
            "weight": self.entry.weight,
            "budget": self.budget,
            "status": self.status,
            "evaluations": self.evaluations,
            "latency_us": self.result.get("latency_us"),
            "default_latency_us": self.result.get("default_latency_us"),
            "speedup": self.result.get("speedup"),
            "error": self.error,
        }


@app.command("tune-set")
def tune_set(
    manifest_path: ManifestArg,
    force: Annotated[bool, typer.Option("--force", help="Re-tune tuned workloads too.")] = False,
    plan: Annotated[
        bool, typer.Option("--plan", help="Show what would be tuned, with budgets; tune nothing.")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Sampler seed of every workload.")] = None,
    strategy: Annotated[str, typer.Option(help="Search strategy.")] = "default",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tune every workload of a manifest on this host; exit code 1 if any failed."""
    from tilewise import store
    from tilewise.manifest import assign_budgets, load_manifest

    settings = settings_for(db)
    try:
        manifest = load_manifest(manifest_path)
        entries = manifest.entries(max_elements=settings.max_elements)
        check_seed(seed)
        from tilewise.search._strategies import check_strategy

        check_strategy(strategy)
        # A plan writes nothing: not even the SQLite file a tune would create (nothing in it
        # is tuned yet).
        if not plan:
            store.check_persistent(settings.db_url)
        fresh = plan and store.is_missing_file(settings.db_url)
        db_handle = None if fresh else store.open_store(settings.db_url)
    except TilewiseError as exc:
        fail(str(exc))
    try:
        rows = [_Row(e) for e in entries]
        try:
            if db_handle is not None:
                _skip_tuned(db_handle, rows, force=force)
            todo = [r for r in rows if r.status == "queued"]
            budgets = assign_budgets(
                manifest,
                [r.entry.weight for r in todo],
                default=settings.default_budget,
                cap=settings.max_budget,
            )
        except TilewiseError as exc:
            fail(str(exc))
        for row, budget in zip(todo, budgets, strict=True):
            row.budget = budget
        if todo and manifest.total_budget is not None and sum(budgets) < manifest.total_budget:
            err.print(
                f"note: of total_budget {manifest.total_budget}, {sum(budgets)} evaluations are "
                f"planned: a workload takes at most {settings.max_budget} "
                "(TILEWISE_MAX_BUDGET)",
                highlight=False,
                soft_wrap=True,
            )
        title = f"{manifest.name or manifest_path}: {len(rows)} workloads"
        if plan:
            _print(title + " (plan)", rows, as_json=as_json, seconds=None)
            return
        assert db_handle is not None  # opened unless planning
        started = time.monotonic()
        interrupted = _tune_all(db_handle, settings, todo, seed=seed, strategy=strategy)
    finally:
        if db_handle is not None:
            db_handle.close()
    _print(title, rows, as_json=as_json, seconds=time.monotonic() - started)
    failed = report_failures([r.to_dict() for r in rows])
    if interrupted:
        left = sum(1 for r in rows if r.status in ("queued", "stopped"))
        err.print(f"interrupted: {left} workload(s) not tuned; the tuned ones are stored")
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(1)


def _skip_tuned(db: Store, rows: list[_Row], *, force: bool) -> None:
    from tilewise import store
    from tilewise.kernels.backends import current_toolchain_id

    if force:
        return
    with db.session() as s:
        for row in rows:
            found = store.find_workload(s, key=row.entry.workload.key)
            tiling = (
                None
                if found is None
                else store.get_tiling(
                    s,
                    workload_id=found.id,
                    toolchain=current_toolchain_id(row.entry.workload.target),
                )
            )
            if tiling is not None:
                row.status = "tuned"
                row.result = {
                    "latency_us": tiling.latency_us,
                    "default_latency_us": tiling.default_latency_us,
                    "speedup": tiling.speedup,
                }


def _tune_all(
    db: Store, settings: Settings, todo: list[_Row], *, seed: int | None, strategy: str
) -> bool:
    """Tune ``todo`` heaviest first; True if Ctrl-C stopped it."""
    from tilewise.kernels.backends import create_backend
    from tilewise.search import Budget, Tuner

    backends: dict[str, Backend | TilewiseError] = {}
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
    )
    order = sorted(todo, key=lambda r: -r.entry.weight)  # stable: manifest order among equals
    total = sum(r.budget or 0 for r in order)
    try:
        with Progress(*columns, console=err) as bar, first_interrupt() as hit:
            overall = bar.add_task("manifest", total=total, info=f"0 of {len(order)} workloads")
            done_evals = 0
            for n, row in enumerate(order):
                if hit.is_set():
                    break
                asked = row.entry.request
                target = asked.target
                if target.name not in backends:
                    try:
                        backends[target.name] = create_backend(
                            target.backend, settings=settings, target=target
                        )
                    except TilewiseError as exc:
                        backends[target.name] = exc
                backend = backends[target.name]
                if isinstance(backend, TilewiseError):
                    row.status, row.error = "failed", str(backend)
                    done_evals += row.budget or 0
                    continue
                assert row.budget is not None
                current = bar.add_task(
                    f"{asked.spec.name} {asked.shape} {asked.dtype}", total=row.budget, info=""
                )

                def show(p: Any, current: Any = current, base: int = done_evals) -> None:
                    best = f"{p.best_us:.1f} us" if p.best_us is not None else "-"
                    info = f"best search time {best} | infeasible {p.infeasible}"
                    bar.update(current, completed=p.evaluations, info=info)
                    bar.update(overall, completed=base + p.evaluations)

                try:
                    result = Tuner(
                        spec=asked.spec,
                        shape=asked.shape,
                        dtype=asked.dtype,
                        target=target,
                        backend=backend,
                        db=db,
                        settings=settings,
                        strategy=strategy,
                    ).run(Budget(row.budget), seed=seed, on_progress=show, should_stop=hit.is_set)
                except TilewiseError as exc:
                    row.status, row.error = "failed", str(exc)
                else:
                    _settle(row, result)
                finally:
                    bar.remove_task(current)
                done_evals += row.budget
                bar.update(overall, completed=done_evals, info=f"{n + 1} of {len(order)} workloads")
    except KeyboardInterrupt:  # the second Ctrl-C
        return True
    finally:
        for backend in backends.values():
            if not isinstance(backend, TilewiseError):
                backend.close()
    return hit.is_set()


def _settle(row: _Row, result: Any) -> None:
    p = result.progress
    row.evaluations = p.evaluations
    if result.stopped:
        row.status = "stopped"
        row.error = (
            f"interrupted: its {p.evaluations} evaluations are kept (the next run continues"
            " from them); nothing was re-measured or stored as its winner"
        )
        return
    if result.best is None:
        row.status = "failed"
        row.error = result.why_no_best(None, ": see `tilewise show` and the workload's records")
        return
    row.status = "succeeded"
    row.result = {
        "latency_us": result.best.latency_us,
        "default_latency_us": None if result.default is None else result.default.latency_us,
        "speedup": result.speedup,
    }


def _print(title: str, rows: list[_Row], *, as_json: bool, seconds: float | None) -> None:
    dicts = [r.to_dict() for r in rows]
    if as_json:
        doc: dict[str, Any] = {"workloads": dicts}
        if seconds is not None:
            doc["seconds"] = round(seconds, 3)
        print(json.dumps(doc))
        return
    print_table(results_table(title, dicts))
    counts: dict[str, int] = {}
    for d in dicts:
        counts[d["status"]] = counts.get(d["status"], 0) + 1
    spent = sum(d["evaluations"] for d in dicts)
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    timing = "" if seconds is None else f" in {seconds:.1f} s"
    out.print(f"{summary}; {spent} evaluations{timing}")
