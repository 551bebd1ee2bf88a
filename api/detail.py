"""A workload's detail (``GET /v1/workloads/{key}``, the dashboard's workload page): its stored
tilings, one per toolchain, which of them is stale here and why, and the history of winners."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.schemas import WorkloadPublic, stored_fields
from tilewise.errors import InputError
from tilewise.kernels.backends import current_toolchain
from tilewise.store import TilingRow, WinnerRow, WorkloadRow
from tilewise.types import Toolchain


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ToolchainPublic(_Out):
    id: str = Field(description="Short hash of the rest; 'unknown' for what predates them.")
    backend: str
    compiler: str = Field(description="e.g. 'clang 19.1' or 'CANN 8.1.RC1'.")
    headers: str = Field(description="'twin <hash of the twin headers>' or 'CANN <version>'.")
    profile: str = Field(description="Hash of the target profile (chip limits).")

    @classmethod
    def of(cls, t: Toolchain) -> ToolchainPublic:
        return cls(**t.to_dict())


class StoredTilingPublic(_Out):
    """A stored winner of one toolchain."""

    toolchain: ToolchainPublic
    current: bool = Field(description="Measured with the service host's toolchain: served.")
    stale: str | None = Field(description="Why it is stale here (not served); null if not.")
    tiling: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    evaluations: int
    updated_at: datetime

    @classmethod
    def of(cls, t: TilingRow, now: Toolchain | None) -> StoredTilingPublic:
        reason = t.toolchain.stale_reason(now)
        return cls(
            toolchain=ToolchainPublic.of(t.toolchain),
            current=now is not None and reason is None,
            stale=reason,
            **stored_fields(t),
        )


class WinnerPublic(_Out):
    """One change of a stored winner: the new winner and why it took the place."""

    at: datetime
    toolchain: str
    record_id: int
    tiling: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    reason: str = Field(description="e.g. 'first winner', 'beat the stored winner side by side "
                        "by 12.3%'.")  # fmt: skip

    @classmethod
    def of(cls, h: WinnerRow) -> WinnerPublic:
        return cls(
            at=h.created_at,
            toolchain=h.toolchain,
            record_id=h.record_id,
            tiling=dict(h.tiling),
            latency_us=h.latency_us,
            default_latency_us=h.default_latency_us,
            speedup=h.speedup,
            reason=h.reason,
        )


class WorkloadDetailPublic(_Out):
    workload: WorkloadPublic
    current_toolchain: ToolchainPublic | None = Field(
        description="The service host's toolchain for the target; null when not known there "
        "(no compiler, no CANN toolkit): then no entry is called stale."
    )
    tilings: list[StoredTilingPublic] = Field(description="One per toolchain, newest first.")
    history: list[WinnerPublic] = Field(description="Every change of a winner, oldest first.")


def host_toolchain(target: str) -> Toolchain | None:
    """The service host's toolchain for ``target``; None when not known (nor the target)."""
    try:
        return current_toolchain(target)
    except InputError:
        return None


def workload_detail(session: Session, row: WorkloadRow) -> WorkloadDetailPublic:
    now = host_toolchain(row.target)
    return WorkloadDetailPublic(
        workload=WorkloadPublic.of(row),
        current_toolchain=None if now is None else ToolchainPublic.of(now),
        tilings=[
            StoredTilingPublic.of(t, now) for t in store.tilings_of(session, workload_id=row.id)
        ],
        history=[WinnerPublic.of(h) for h in store.winner_history(session, workload_id=row.id)],
    )
