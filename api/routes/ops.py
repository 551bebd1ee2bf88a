"""/v1/ops: the ops, their search spaces and their fusion analysis."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tilewise.api.analysis import analyse
from tilewise.api.deps import OpDep, SpaceQueryDep, WorkloadQueryDep
from tilewise.api.schemas import AnalysisPublic, OpDetail, OpPublic, TunablePublic
from tilewise.kernels.ops import OpSpec, list_ops

router = APIRouter(prefix="/v1/ops", tags=["ops"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such op."}}


def _public(spec: OpSpec) -> OpPublic:
    return OpPublic(
        name=spec.name,
        summary=spec.summary,
        version=spec.version,
        dims=list(spec.dims),
        dtypes=list(spec.dtypes),
    )


@router.get("", response_model=list[OpPublic])
def get_ops() -> list[OpPublic]:
    return [_public(spec) for spec in list_ops()]


@router.get("/{op}", response_model=OpDetail, responses=_NOT_FOUND)
def get_op_space(spec: OpDep, what: SpaceQueryDep) -> OpDetail:
    """Dims, dtypes and the tunables with their domains for one shape, dtype and target."""
    tunables = spec.tunables(what.shape, what.dtype, what.target)
    return OpDetail(
        **_public(spec).model_dump(),
        shape=dict(what.shape),
        dtype=what.dtype,
        target=what.target.name,
        tunables=[TunablePublic.model_validate(t.to_dict()) for t in tunables],
    )


@router.get("/{op}/analysis", response_model=AnalysisPublic, responses=_NOT_FOUND)
def get_analysis(what: WorkloadQueryDep) -> AnalysisPublic:
    """What fusing this op saves for one shape: traffic, UB use of the default tiling, and a
    roofline estimate of the speedup (a model estimate, not a measurement)."""
    return analyse(what)
