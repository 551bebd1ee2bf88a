"""Workers: registered and kept alive by their heartbeats."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tilewise.errors import InputError
from tilewise.status import WorkerStatus
from tilewise.store._coerce import enum_value
from tilewise.store._models import WorkerModel, utcnow


@dataclass(frozen=True)
class WorkerRow:
    id: str
    host: str
    pid: int
    target: str
    device: int | None
    status: WorkerStatus
    started_at: datetime
    last_heartbeat: datetime

    def alive(self, lease_s: float, now: datetime | None = None) -> bool:
        """Not stopped and heard from within ``lease_s`` seconds: a worker killed without its
        stop (SIGKILL, a lost host) keeps its last status, busy or idle, on record."""
        since = (now or utcnow()) - timedelta(seconds=lease_s)
        return self.status is not WorkerStatus.STOPPED and self.last_heartbeat >= since


def _worker_row(m: WorkerModel) -> WorkerRow:
    return WorkerRow(
        id=m.id,
        host=m.host,
        pid=m.pid,
        target=m.target,
        device=m.device,
        status=WorkerStatus(m.status),
        started_at=m.started_at,
        last_heartbeat=m.last_heartbeat,
    )


def heartbeat_worker(
    session: Session,
    *,
    worker_id: str,
    host: str,
    pid: int,
    target: str,
    device: int | None = None,
    status: WorkerStatus | str = WorkerStatus.IDLE,
    now: datetime | None = None,
) -> WorkerRow:
    """Register a worker or refresh its heartbeat (an upsert keyed by ``worker_id``)."""
    status = enum_value(WorkerStatus, status)
    now = now or utcnow()
    values: dict[str, Any] = {
        "host": host,
        "pid": pid,
        "target": target,
        "device": device,
        "status": status,
        "last_heartbeat": now,
    }
    for _ in range(2):
        model = session.get(WorkerModel, worker_id, with_for_update=True, populate_existing=True)
        if model is not None:
            for name, value in values.items():
                setattr(model, name, value)
            session.flush()
            return _worker_row(model)
        model = WorkerModel(id=worker_id, started_at=now, **values)
        try:
            with session.begin_nested():
                session.add(model)
        except IntegrityError:
            continue  # registered concurrently under the same id: update that row
        return _worker_row(model)
    raise InputError(f"cannot register worker {worker_id!r}")


def list_workers(
    session: Session,
    *,
    alive_within: float | None = None,
    now: datetime | None = None,
) -> list[WorkerRow]:
    """Workers by id; with ``alive_within`` (seconds), only those heard from since then and
    not stopped."""
    query = select(WorkerModel)
    if alive_within is not None:
        since = (now or utcnow()) - timedelta(seconds=alive_within)
        query = query.where(
            WorkerModel.last_heartbeat >= since, WorkerModel.status != WorkerStatus.STOPPED
        )
    return [
        _worker_row(m)
        for m in session.scalars(
            query.order_by(WorkerModel.id).execution_options(populate_existing=True)
        )
    ]
