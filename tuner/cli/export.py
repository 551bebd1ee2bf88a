"""``tilewise export``: a tiling table as versioned JSON or a C header."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from tilewise.cli._common import (
    AnyToolchainOpt,
    app,
    err,
    fail,
    out,
    output_path,
    settings_for,
)
from tilewise.files import write_atomically
from tilewise.types import Workload

if TYPE_CHECKING:
    from tilewise.export import GroupPortfolio, MeasureFn
    from tilewise.search import Attempt
    from tilewise.settings import Settings
    from tilewise.store import Store
    from tilewise.types import Tiling, Toolchain

FORMATS = ("json", "header")


@app.command("export")
def export(
    op: Annotated[str, typer.Argument(help="Op name, see `tilewise ops`.")],
    target: Annotated[
        str | None, typer.Option("--target", help="Only this target (default: all).")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Only this dtype (default: all).")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="json (for tilewise.runtime) or header (C).")
    ] = "json",
    output: Annotated[
        str, typer.Option("--output", "-o", help="File to write; - for stdout.")
    ] = "-",
    db: Annotated[
        str | None, typer.Option("--db", help="SQLAlchemy URL; default from settings.")
    ] = None,
    portfolio: Annotated[
        int | None,
        typer.Option(
            "--portfolio",
            help="At most K tilings per target and dtype, each tuned shape mapped to one "
            "(greedy set cover on the measured records).",
        ),
    ] = None,
    within: Annotated[
        float | None,
        typer.Option(
            "--within",
            help="With --portfolio: a member covers a shape within this percent of the shape's "
            "tuned latency (default 5).",
        ),
    ] = None,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Measure on the target: with --portfolio the tilings the records lack (else "
            "they count as not covering); without, each grid cell for untuned shapes, its "
            "candidates side by side with the default (instead of the records' model), the "
            "grid then kept in the database for later exports of the same tunes.",
        ),
    ] = False,
    report: Annotated[
        bool,
        typer.Option("--report", help="With --portfolio: print coverage for K = 1..8."),
    ] = False,
    any_toolchain: AnyToolchainOpt = False,
) -> None:
    """Export OP's tiling table as versioned JSON or a C header for a host TilingFunc.

    With --portfolio K, each tuned shape holds one of at most K tilings instead of its own."""
    from tilewise import export as exporting
    from tilewise.errors import InputError, TilewiseError
    from tilewise.search import cell_measurer

    settings = settings_for(db)
    try:
        if fmt not in FORMATS:
            raise InputError(f"unknown format {fmt!r}; one of: {', '.join(FORMATS)}")
        if portfolio is None and (report or within is not None):
            raise InputError("--within and --report go with --portfolio K")
        within = 5.0 if within is None else within
        if not 0 <= within < 1000:  # in the unit the option is given in, not as a share
            raise InputError(f"--within takes a percent at least 0 and below 1000, got {within:g}")
        exporting.canonical_filters(op, target, dtype)  # bad names fail before the DB
        path = output_path(output)
        from tilewise import store

        db_handle = store.open_store(settings.db_url, create=False)
        built: list[Any] = []
        measured: list[_Measured] = []
        try:
            with db_handle.session() as session, ExitStack() as backends:
                if portfolio is None:
                    doc = exporting.table_document(
                        session,
                        op=op,
                        target=target,
                        dtype=dtype,
                        any_toolchain=any_toolchain,
                        measure_cells=cell_measurer(settings, backends) if measure else None,
                    )
                else:
                    doc, built = exporting.portfolio_document(
                        session,
                        op=op,
                        target=target,
                        dtype=dtype,
                        k=portfolio,
                        within=within / 100,
                        measure=_measurer(settings, backends, measured) if measure else None,
                        any_toolchain=any_toolchain,
                    )
            if measured:
                _record_measured(db_handle, measured)
            if measure and portfolio is None:
                # Kept for every later export of the same tunes (the service's, the runtime's):
                # in a session of its own, after the minutes of measuring.
                with db_handle.session() as session:
                    exporting.keep_measured_grids(session, doc)
        finally:
            db_handle.close()
        if fmt == "json":
            text = exporting.dump_document(doc)
        else:
            text = exporting.render_header(doc, op=op)
        if path is None:
            sys.stdout.write(text)
        else:
            write_atomically(path, text)
    except TilewiseError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}")
    stale = doc["toolchains"]["other_toolchain_entries"]
    if stale:
        err.print(
            f"included {stale} entries measured with another toolchain (stale)"
            if any_toolchain
            else f"left out {stale} entries measured with another toolchain (stale; "
            "--any-toolchain to include them)",
            markup=False,
            highlight=False,
        )
    if report:
        (err if path is None else out).print(
            coverage_report(built), markup=False, highlight=False, soft_wrap=True
        )
    if path is not None:
        count = len(doc["entries"])
        if fmt == "header":  # the header holds the op's current version only
            from tilewise.kernels.ops import get_op

            version = get_op(op).version
            count = sum(1 for e in doc["entries"] if e["op_version"] == version)
        err.print(
            f"wrote {count} entries of {op} ({fmt}) to {path}",
            markup=False,
            highlight=False,
        )


class _Measured(NamedTuple):
    """A pair measured now: what a record of it needs."""

    workload: Workload
    tiling: Tiling
    attempt: Attempt
    env: dict[str, Any]
    toolchain: Toolchain


def _measurer(settings: Settings, backends: ExitStack, measured: list[_Measured]) -> MeasureFn:
    """Measures a tiling at a shape on its target's backend (opened once per target, closed
    with ``backends``), as the tuner measures: static check, build, checked run; appends each
    measurement to ``measured`` (:func:`_record_measured` keeps them)."""
    from tilewise.kernels.backends import create_backend
    from tilewise.search import Measurer

    opened: dict[str, Any] = {}

    def measure(spec: Any, target: Any, dtype: str, shape: Any, tiling: Any) -> float | None:
        if target.name not in opened:
            opened[target.name] = backends.enter_context(
                create_backend(target.backend, settings=settings, target=target)
            )
        backend = opened[target.name]
        measurer = Measurer(
            spec=spec, shape=shape, dtype=dtype, target=target, backend=backend, settings=settings
        )
        attempt = measurer.attempt(tiling)
        workload = Workload(spec.name, spec.version, target.name, dtype, shape)
        env = {**backend.environment(), "target": target.name}
        measured.append(_Measured(workload, tiling, attempt, env, backend.toolchain(target)))
        latency: float | None = attempt.latency_us
        return latency

    return measure


def _record_measured(db: Store, measured: list[_Measured]) -> None:
    """Record each tiling measured now that its shape's records lack (source ``portfolio``),
    so that the next export, and the model of untuned shapes, find it; a shape's own tiling,
    measured again beside the others, has its records already. Written after the export's
    reading transaction, in one transaction of their own."""
    from tilewise import store
    from tilewise.status import RecordSource

    with db.session() as s:
        for m in measured:
            workload = store.commit_workload(s, m.workload)
            if store.find_record(s, workload_id=workload.id, tiling_key=m.tiling.key()):
                continue
            store.add_record(
                s,
                workload_id=workload.id,
                tiling=m.tiling,
                **m.attempt.record_fields(),
                source=RecordSource.PORTFOLIO,
                env=m.env,
                toolchain=m.toolchain,
            )


def coverage_report(built: list[GroupPortfolio]) -> str:
    """Per target and dtype, the greedy portfolio's coverage for K = 1..8 as a Markdown table."""
    lines = []
    for g in built:
        pairs = g.pairs
        lines.append(
            f"{g.op} {g.target} {g.dtype}: {len(g.shapes)} tuned shapes, "
            f"{len(g.candidates)} candidate tilings (the default included); (shape, tiling) "
            f"pairs: {pairs['records']} in the records, {pairs['measured_now']} measured now, "
            f"{pairs['not_measured']} not measured (not covering), {pairs['not_carried']} "
            "not carried over"
        )
        share = g.report[0].within if g.report else 0.05
        extra = share not in (0.02, 0.05)  # a column of its own only for another X
        lines.append(
            "| K | tilings |"
            + (f" within {share * 100:g}% |" if extra else "")
            + " within 2% | within 5% | worst slowdown | mean slowdown | shapes unmeasured |"
        )
        lines.append("|---:|---:|" + ("---:|" if extra else "") + "---:|---:|---:|---:|---:|")
        for c in g.report:
            worst = "-" if c.worst is None else f"{c.worst:.3f}x"
            mean = "-" if c.mean is None else f"{c.mean:.3f}x"
            lines.append(
                f"| {c.k} | {c.members} |"
                + (f" {c.covered:.0%} |" if extra else "")
                + f" {c.within_2:.0%} | {c.within_5:.0%} | {worst} | {mean} | {c.unmeasured} |"
            )
        lines.append("")
    return "\n".join(lines) if lines else "no tuned shapes of the running op version"
