"""What the dashboard pages show, assembled from the store (the templates only lay it out)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup
from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.axes import Scale
from tilewise.api.charts import Curve, chart, sparkline
from tilewise.api.detail import host_toolchain, workload_detail
from tilewise.api.errors import NotFound
from tilewise.kernels.ops import OPS, get_op
from tilewise.store import JobRow, RecordRow, RecordStatus, TilingRow, WorkloadRow
from tilewise.types import Toolchain

#: Records listed on a workload page (the newest); the chart uses all of them.
MAX_RECORDS_SHOWN = 500
JOBS_SHOWN = 50
#: The most-asked untuned shapes listed on the index.
MISSES_SHOWN = 20

#: A workload key (``Workload.key``): 32 hex digits.
_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class TunedRow:
    workload: WorkloadRow
    tiling: TilingRow
    curve: Curve
    spark: Markup
    current: bool  # tuned with the op's current kernel (a changed kernel is a new workload)
    stale: str | None = None  # why its toolchain is not this host's (None: it is, or unknown)


@dataclass(frozen=True)
class JobView:
    job: JobRow
    workload: WorkloadRow

    @property
    def pct(self) -> int:
        return min(100, round(100 * self.job.done_evals / self.job.budget_evals))


def _current_version(op: str) -> str | None:
    return get_op(op).version if op in OPS else None


def _curve(session: Session, workload_id: int) -> Curve:
    return Curve.of(store.records_for(session, workload_id=workload_id, status=RecordStatus.OK))


def _jobs(session: Session, jobs: list[JobRow]) -> list[JobView]:
    cache: dict[int, WorkloadRow] = {}
    views = []
    for job in jobs:
        if job.workload_id not in cache:
            row = store.get_workload(session, workload_id=job.workload_id)
            assert row is not None  # a foreign key
            cache[job.workload_id] = row
        views.append(JobView(job, cache[job.workload_id]))
    return views


def _current_toolchains(session: Session) -> dict[str, Toolchain | None]:
    """This host's toolchain per target with workloads (None: not known here)."""
    return {target: host_toolchain(target) for target in store.workload_targets(session)}


def index(session: Session, lease_s: float) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    tuned = []
    now = _current_toolchains(session)
    toolchains = {target: None if t is None else t.id for target, t in now.items()}
    for workload, tiling in store.best_tilings(session, toolchains=toolchains, any_toolchain=True):
        if workload.op not in versions:
            versions[workload.op] = _current_version(workload.op)
        curve = _curve(session, workload.id)
        tuned.append(
            TunedRow(
                workload,
                tiling,
                curve,
                sparkline(curve),
                versions[workload.op] == workload.op_version,
                tiling.toolchain.stale_reason(now.get(workload.target)),
            )
        )
    current = {name: get_op(name).version for name in OPS}
    return {
        "tuned": tuned,
        "misses": store.list_misses(
            session, untuned=current, toolchains=toolchains, limit=MISSES_SHOWN
        ),
        "jobs": _jobs(session, store.list_jobs(session, limit=JOBS_SHOWN)),
        "jobs_total": store.count_jobs(session),
        "workers": [(w, w.alive(lease_s)) for w in store.list_workers(session)],
    }


def workload(session: Session, key: str, scale: Scale = "linear") -> dict[str, Any]:
    # Anything else names no workload, and must not reach the database: PostgreSQL refuses a NUL
    # in a text parameter (a 503 for a bad URL).
    row = store.find_workload(session, key=key) if _KEY.fullmatch(key) else None
    if row is None:
        raise NotFound(f"no workload {key!r}")
    detail = workload_detail(session, row)
    # The served winner: this host's toolchain's (or, when that is not known, the newest).
    tiling = store.get_tiling(
        session,
        workload_id=row.id,
        toolchain=None if detail.current_toolchain is None else detail.current_toolchain.id,
    )
    records: list[RecordRow] = store.records_for(session, workload_id=row.id)
    curve = Curve.of(records)
    return {
        "w": row,
        "tiling": tiling,
        "curve": curve,
        "chart": chart(
            curve,
            default_us=tiling.default_latency_us if tiling else None,
            winner_us=tiling.latency_us if tiling else None,
            winner_record=tiling.record_id if tiling else None,
            scale=scale,
        ),
        "scale": scale,
        "records": records[-MAX_RECORDS_SHOWN:][::-1],
        "records_total": len(records),
        "jobs": _jobs(session, store.list_jobs(session, workload_id=row.id, limit=JOBS_SHOWN)),
        "current": _current_version(row.op) == row.op_version,
        "detail": detail,
    }
