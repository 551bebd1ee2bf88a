"""``tilewise show``: the stored best tiling of one workload."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tilewise.cli._common import (
    AnyToolchainOpt,
    DbOpt,
    DtypeOpt,
    JsonOpt,
    ShapeOpt,
    TargetOpt,
    app,
    fail,
    out,
    settings_for,
    workload_request,
)
from tilewise.errors import TilewiseError

if TYPE_CHECKING:
    from tilewise.types import Toolchain


@app.command()
def show(
    op: Annotated[str, typer.Argument(help="Op name.")],
    shape: ShapeOpt,
    dtype: DtypeOpt = "float32",
    target: TargetOpt = "cpu-twin",
    db: DbOpt = None,
    as_json: JsonOpt = False,
    any_toolchain: AnyToolchainOpt = False,
) -> None:
    """Show the stored best tiling of a workload, its toolchain and the history of winners."""
    from tilewise import store
    from tilewise.kernels.backends import current_toolchain
    from tilewise.types import Workload

    settings = settings_for(db)
    try:
        asked = workload_request(op, shape, dtype, target, settings)
        spec, parsed, dtype, profile = asked.spec, asked.shape, asked.dtype, asked.target
        workload = Workload(spec.name, spec.version, profile.name, dtype, parsed)
        # create=False: a database that does not exist (a SQLite file not there, a mistyped
        # path) is an error naming it, not a database where nothing is tuned; none is created.
        db_handle = store.open_store(settings.db_url, create=False)
        try:
            with db_handle.session() as s:
                row = store.find_workload(s, key=workload.key)
                stored = store.tilings_of(s, workload_id=row.id) if row else []
                history = store.winner_history(s, workload_id=row.id) if row else []
        finally:
            db_handle.close()
        now = current_toolchain(profile)
    except TilewiseError as exc:
        fail(str(exc))
    # The current toolchain's entry; the newest other one stands in when asked for, or when
    # this host's toolchain is not known (nothing to call stale then).
    fresh = [t for t in stored if t.toolchain.stale_reason(now) is None]
    best = fresh[0] if fresh else (stored[0] if stored and any_toolchain else None)
    stale = [t for t in stored if t not in fresh]
    if best is None:
        # What a model calling the op would get for this shape: the runtime's own answer.
        from tilewise.runtime import TilingTable

        try:
            table = TilingTable.from_db(
                settings.db_url, op=spec.name, target=profile.name, any_toolchain=any_toolchain
            )
            answer = table.lookup(spec.name, target=profile.name, dtype=dtype, shape=parsed)
        except TilewiseError as exc:
            fail(str(exc))
        if as_json:
            doc = {
                "workload": workload.to_dict(),
                "tuned": False,
                "runtime": answer.to_dict(),
                "stale": [_stale_dict(t, now) for t in stale],
                "history": [_history_dict(h) for h in history],
            }
            print(json.dumps(doc))
        else:
            # The command that tunes this workload: its dtype and target where not tune's.
            command = f"tilewise tune {spec.name} --shape {parsed.key()}"
            command += f" --dtype {dtype}" if dtype != "float32" else ""
            command += f" --target {profile.name}" if profile.name != "cpu-twin" else ""
            out.print(
                f"{spec.name} {parsed} {dtype} on {profile.name}: not tuned (run `{command}`)"
            )
            tuned = answer.workload.shape.key() if answer.workload is not None else None
            gain = answer.predicted_gain
            origin = {
                "chosen": f"the tiling tuned for {tuned}, re-derived for this shape, predicted "
                f"{gain}x the default's speed by the table's model",
                "predicted_default": "this shape's default: no tuned shape's tiling was "
                "predicted faster by more than the table's model's error",
                "measured_faster": f"the tiling tuned for {tuned}, re-derived for this shape, "
                f"measured {gain}x the default's speed over the sample shapes of its grid cell",
                "measured_default": "this shape's default: no tuned shape's tiling measured "
                "faster than the default in its grid cell",
                "carried": f"the tiling tuned for {tuned}, re-derived for this shape",
                "kept_default": f"this shape's default: the nearest tuned shape ({tuned}) kept "
                "its default",
                "measured_slower": f"this shape's default: the tiling tuned for {tuned} measured "
                "slower than the default at other shapes",
            }.get(answer.rule, "the op's default heuristic (no tuned shape of the op fits)")
            away = f" (log2 distance {answer.distance:.2f})" if tuned is not None else ""
            out.print(
                f"the runtime answers {answer.source}: {origin}{away}: "
                f"{json.dumps(dict(answer.tiling))}",
                markup=False,
            )
            for t in stale:
                out.print(
                    f"not served, stale: {t.toolchain.stale_reason(now)}: "
                    f"{json.dumps(dict(t.tiling))} at {t.latency_us:.1f} us "
                    "(--any-toolchain shows it)",
                    markup=False,
                )
            _print_history(history)
        raise typer.Exit(1)
    reason = best.toolchain.stale_reason(now)
    result = {
        "workload": workload.to_dict(),
        "tuned": True,
        "tiling": dict(best.tiling),
        "latency_us": best.latency_us,
        "default_latency_us": best.default_latency_us,
        "speedup": best.speedup,
        "evaluations": best.evaluations,
        "toolchain": best.toolchain.to_dict(),
        "stale": reason,
        "other_toolchains": [_stale_dict(t, now) for t in stored if t is not best],
        "history": [_history_dict(h) for h in history],
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
        current = "this host's" if now is not None else "this host's is not known"
        out.print(
            f"toolchain {best.toolchain}: " + (f"stale: {reason}" if reason else current),
            markup=False,
        )
        for t in stored:
            if t is not best:
                why = t.toolchain.stale_reason(now) or "another toolchain"
                out.print(
                    f"also stored, stale: {why}: {json.dumps(dict(t.tiling))} at "
                    f"{t.latency_us:.1f} us",
                    markup=False,
                )
        _print_history(history)


#: The newest changes of the winner that `show` prints.
HISTORY_SHOWN = 10


def _stale_dict(t: Any, now: Toolchain | None) -> dict[str, Any]:
    return {
        "tiling": dict(t.tiling),
        "latency_us": t.latency_us,
        "speedup": t.speedup,
        "toolchain": t.toolchain.to_dict(),
        "stale": t.toolchain.stale_reason(now),
    }


def _history_dict(h: Any) -> dict[str, Any]:
    return {
        "at": h.created_at.isoformat(timespec="seconds"),
        "toolchain": h.toolchain,
        "record_id": h.record_id,
        "tiling": dict(h.tiling),
        "latency_us": h.latency_us,
        "default_latency_us": h.default_latency_us,
        "speedup": h.speedup,
        "reason": h.reason,
    }


def _print_history(history: list[Any]) -> None:
    """The newest changes of the stored winner, oldest first, as a short table."""
    if not history:
        return
    from rich.table import Table

    shown = history[-HISTORY_SHOWN:]
    more = f" (newest {len(shown)} of {len(history)})" if len(shown) < len(history) else ""
    table = Table(title=f"history of winners{more}", title_justify="left", box=None)
    for name in ("when (UTC)", "toolchain", "latency", "speedup", "why", "tiling"):
        table.add_column(name, justify="right" if name in ("latency", "speedup") else "left")
    for h in shown:
        table.add_row(
            h.created_at.strftime("%Y-%m-%d %H:%M"),
            h.toolchain,
            f"{h.latency_us:.1f} us",
            f"{h.speedup:.2f}x" if h.speedup else "-",
            h.reason,
            " ".join(f"{k}={v}" for k, v in h.tiling.items()),
        )
    out.print(table)
