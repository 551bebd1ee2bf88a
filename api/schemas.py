"""Request and response bodies: one model per direction (``*Create`` in, ``*Public`` out).

Request models check everything that needs no settings (names exist, dims are integers within
the op's bounds); bounds that come from settings (largest budget, largest tensor) are checked
in ``tilewise.api.deps`` and reported the same way, as a 422 naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from tilewise.api.openapi import SHAPE_DESCRIPTION, job_create_schema
from tilewise.errors import InputError
from tilewise.kernels.ops import get_op
from tilewise.kernels.request import parse_shape
from tilewise.kernels.targets import get_target
from tilewise.manifest import Manifest
from tilewise.runtime import Rule
from tilewise.store import (
    JobRow,
    JobStatus,
    RecordSource,
    RecordStatus,
    TilingRow,
    WorkerRow,
    WorkerStatus,
    WorkloadRow,
)
from tilewise.types import MAX_DIM, Workload

# The least value is the op's (a padding may be 0): JobCreate checks it, naming the dim.
Dim = Annotated[int, Field(strict=True, le=MAX_DIM)]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


# ---------------------------------------------------------------------------------------------
# In


def _below(floor: int) -> PydanticCustomError:
    """The error pydantic's own ``gt=0`` (or ``ge=floor``) gives."""
    if floor == 1:
        return PydanticCustomError("greater_than", "Input should be greater than {gt}", {"gt": 0})
    return PydanticCustomError(
        "greater_than_equal", "Input should be greater than or equal to {ge}", {"ge": floor}
    )


class JobCreate(BaseModel):
    """``POST /v1/jobs``: tune ``op`` for one shape on one target."""

    # The schema carries the enums and each op's dims (tilewise.api.openapi).
    model_config = ConfigDict(extra="forbid", json_schema_extra=job_create_schema)

    op: str = Field(description="Op name, see GET /v1/ops.", examples=["scale_relu_dropout"])
    dtype: str = Field(default="float32", description="One of the op's dtypes.")
    target: str = Field(default="cpu-twin", description="See GET /v1/targets.")
    shape: dict[str, Dim] = Field(
        description=SHAPE_DESCRIPTION, examples=[{"N": 65536}, "M=1024,N=512,K=256"]
    )
    # Strict, as the batches' manifest is: a budget of true (taken as 1), "5" or a force of
    # "yes" is a mistake to report, not a value to guess; the schema says the same.
    budget: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Measured evaluations; settings.default_budget if absent.",
    )
    # Finite: Python's JSON reads Infinity, which was stored as the budget and shown as null.
    seconds: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, strict=True, description="Optional time budget."
    )
    force: bool = Field(
        default=False, strict=True, description="Re-tune even if the workload is tuned."
    )

    # Validators run in field order; a later one sees the earlier validated values in
    # info.data (and skips when the op itself was invalid: that error is reported already).
    @field_validator("op")
    @classmethod
    def _op(cls, value: str) -> str:
        return get_op(value).name

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str, info: ValidationInfo) -> str:
        if "op" in info.data:
            get_op(info.data["op"]).validate_dtype(value)
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return get_target(value).name

    @field_validator("shape", mode="before")
    @classmethod
    def _shape_text(cls, value: object, info: ValidationInfo) -> object:
        """The text form ("M=1024,N=512,K=256", or a JSON object as text) as the object."""
        if not isinstance(value, str):
            return value
        spec = get_op(info.data["op"]) if "op" in info.data else None
        try:
            return dict(parse_shape(value, spec))
        except InputError as exc:  # as _shape: a message pydantic can carry
            raise ValueError(str(exc).encode("utf-8", "backslashreplace").decode()) from None

    @field_validator("shape")
    @classmethod
    def _shape(cls, value: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        if "op" in info.data:
            spec = get_op(info.data["op"])
            low = [d for d, v in value.items() if d in spec.dims and v < spec.dim_floors.get(d, 1)]
            if low:  # named as the type's own bounds are: ["body", "shape", "N"]
                raise ValidationError.from_exception_data(
                    "shape",
                    [
                        InitErrorDetails(
                            type=_below(spec.dim_floors.get(d, 1)), loc=(d,), input=value[d]
                        )
                        for d in low
                    ],
                )
            try:
                return dict(spec.validate_shape(value))
            except InputError as exc:
                # The message names the dims as sent; pydantic cannot carry one that is not
                # UTF-8 (a dim name with a lone surrogate, "\ud800" in JSON): it would raise, a
                # 500 for a 422.
                raise ValueError(str(exc).encode("utf-8", "backslashreplace").decode()) from None
        return value


class BatchCreate(Manifest):
    """``POST /v1/batches``: a tuning manifest (the file ``tilewise submit`` sends, as JSON)."""

    force: bool = Field(
        default=False, strict=True, description="Re-tune the workloads tuned already."
    )


# ---------------------------------------------------------------------------------------------
# Out


class WorkloadPublic(_Out):
    key: str
    op: str
    op_version: str
    target: str
    dtype: str
    shape: dict[str, int]

    @classmethod
    def of(cls, w: Workload | WorkloadRow) -> WorkloadPublic:
        return cls(
            key=w.key,
            op=w.op,
            op_version=w.op_version,
            target=w.target,
            dtype=w.dtype,
            shape=dict(w.shape),
        )


class JobPublic(_Out):
    id: int
    status: JobStatus
    workload: WorkloadPublic
    budget: int
    budget_seconds: float | None
    force: bool
    evaluations: int = Field(description="Measured evaluations done so far.")
    progress: float = Field(description="evaluations / budget, 0..1.")
    best_latency_us: float | None = Field(description="Best so far.")
    speedup: float | None = Field(description="Over the op's default tiling.")
    error: str | None
    worker_id: str | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: JobRow, workload: WorkloadRow) -> JobPublic:
        done = job.done_evals
        return cls(
            id=job.id,
            status=job.status,
            workload=WorkloadPublic.of(workload),
            budget=job.budget_evals,
            budget_seconds=job.budget_seconds,
            force=job.force,
            evaluations=done,
            progress=min(1.0, done / job.budget_evals),
            best_latency_us=job.best_latency_us,
            speedup=job.speedup,
            error=job.error,
            worker_id=job.worker_id,
            attempts=job.attempts,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )


class JobList(_Out):
    jobs: list[JobPublic]
    total: int = Field(description="Jobs that match, listed or not (the list stops at limit).")


class TunedPublic(_Out):
    """The stored result of a tuned workload (``POST /v1/jobs`` answers 200 with it)."""

    status: Literal["tuned"] = "tuned"
    workload: WorkloadPublic
    tiling: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    speedup: float | None
    evaluations: int
    updated_at: datetime

    @classmethod
    def of(cls, workload: WorkloadRow, tiling: TilingRow) -> TunedPublic:
        return cls(workload=WorkloadPublic.of(workload), **stored_fields(tiling))


def stored_fields(tiling: TilingRow) -> dict[str, Any]:
    """The fields every public view of a stored winner shows."""
    return {
        "tiling": dict(tiling.tiling),
        "latency_us": tiling.latency_us,
        "default_latency_us": tiling.default_latency_us,
        "speedup": tiling.speedup,
        "evaluations": tiling.evaluations,
        "updated_at": tiling.updated_at,
    }


class TunablePublic(_Out):
    name: str
    values: list[int]
    compile_time: bool
    doc: str


class OpPublic(_Out):
    name: str
    summary: str
    version: str
    dims: list[str]
    dtypes: list[str]


class OpDetail(OpPublic):
    """An op's search space. Runtime domains depend on the shape and target they are for."""

    shape: dict[str, int]
    dtype: str
    target: str
    tunables: list[TunablePublic]


class TrafficPublic(_Out):
    unfused_bytes: int
    fused_bytes: int
    saved_bytes: int
    reduction_pct: float = Field(description="Global-memory traffic removed by fusion, %.")
    worth_fusing: bool = Field(description="reduction_pct >= 30.")
    unfused_kernels: int
    flops: int
    intensity_unfused: float = Field(description="flops per byte moved, unfused.")
    intensity_fused: float = Field(description="flops per byte moved, fused.")


class UbPublic(_Out):
    default_tiling: dict[str, int]
    bytes: int = Field(description="UB the default tiling allocates per core.")
    capacity: int = Field(description="The target's UB per core.")
    usable: int = Field(description="UB a kernel may allocate (capacity less reserves).")
    pct: float = Field(description="bytes / capacity, %.")
    high: bool = Field(description="pct > 80: little room for double buffering or bigger tiles.")


class RooflinePublic(_Out):
    bandwidth_gb_s: float = Field(description="ddr_rate × clock × AI cores.")
    peak_tflops: float = Field(description="Cube peak: AI cores × 16³ MACs × 2 × clock.")
    ridge_flops_per_byte: float
    bound: Literal["memory", "compute"] = Field(description="Of the fused op.")
    unfused_time_us: float
    fused_time_us: float
    speedup_lower_bound: float
    note: str


class AnalysisPublic(_Out):
    op: str
    shape: dict[str, int]
    dtype: str
    target: str
    traffic: TrafficPublic
    ub: UbPublic
    roofline: RooflinePublic


class LookupPublic(_Out):
    """A tiling for the asked shape and the rule that chose it (tilewise.runtime's order)."""

    tiling: dict[str, int]
    source: Literal["exact", "nearest", "default"]
    workload: WorkloadPublic | None = Field(
        description="The tuned workload whose tiling answers; null for the default heuristic."
    )
    latency_us: float | None = Field(description="Measured latency of that tuned workload.")
    distance: float | None = Field(
        default=None, description="0 for exact; sum over dims of |log2 asked - log2 tuned|."
    )
    rule: Rule = Field(
        default="exact",
        description="How the tiling was chosen: as tuned; by the table's choice grid, a tuned "
        "shape's tiling re-derived for this shape that a model fitted on the op's records "
        "predicted faster than the default by more than its error (chosen), or the default "
        "because none was (predicted_default); without a grid, the nearest tuned shape's "
        "tiling re-derived for this shape by the op's carry rules; this shape's default "
        "because that shape kept its default, or because its tiling carried to other tuned "
        "shapes was measured slower than their default; the default with no tuned shape to go "
        "by.",
    )
    predicted_gain: float | None = Field(
        default=None,
        description="The default's latency over the answered tiling's: as the table's model "
        "predicts (chosen; for predicted_default that of the best candidate), else the nearest "
        "tuned shape's tiling carried to the table's other tuned shapes, measured (geometric "
        "mean); null without either.",
    )


class TargetPublic(_Out):
    name: str
    backend: str
    soc: str
    cube_cores: int
    vector_cores: int
    freq_mhz: int
    ub: int
    l1: int
    l0a: int
    l0b: int
    l0c: int
    bt: int
    l2: int
    ddr_rate: int
    source: str


class WorkerPublic(_Out):
    id: str
    host: str
    pid: int
    target: str
    device: int | None
    status: WorkerStatus = Field(description="As the worker last said it (kept after a kill).")
    alive: bool = Field(
        description="Not stopped and heard from within a lease (TILEWISE_LEASE_S): a worker "
        "killed without its stop keeps its last status, and is not alive."
    )
    started_at: datetime
    last_heartbeat: datetime

    @classmethod
    def of(cls, w: WorkerRow, lease_s: float) -> WorkerPublic:
        return cls(
            id=w.id,
            host=w.host,
            pid=w.pid,
            target=w.target,
            device=w.device,
            status=w.status,
            alive=w.alive(lease_s),
            started_at=w.started_at,
            last_heartbeat=w.last_heartbeat,
        )


class HealthPublic(_Out):
    status: Literal["ok"]
    database: str = Field(description="The database kind (sqlite, postgresql).")
    revision: str


class RecordPublic(_Out):
    """One measurement (or refusal, or prediction) of one tiling of a workload."""

    id: int
    tiling: dict[str, int]
    status: RecordStatus
    source: RecordSource
    latency_us: float | None = Field(description="Median of the samples; only when ok.")
    spread: float | None = Field(description="Interquartile range over the median.")
    samples_us: list[float] | None
    error: str | None
    constraints: dict[str, float] | None = Field(description="> 0: violated, by that much.")
    trial_number: int | None
    job_id: int | None
    env: dict[str, Any] = Field(description="The toolchain and target that measured it.")
    created_at: datetime


class RecordsPublic(_Out):
    """``GET /v1/workloads/{key}/records`` (format ``tilewise.records``), as ``tilewise
    records --format json`` writes it."""

    format: Literal["tilewise.records"]
    workload: WorkloadPublic
    records: list[RecordPublic]


BatchItemStatus = Literal["tuned", "queued", "running", "succeeded", "failed", "cancelled"]
BatchStatus = Literal["queued", "running", "succeeded", "failed"]


class BatchItemPublic(_Out):
    position: int = Field(description="Its place among the batch's workloads, from 0.")
    workload: WorkloadPublic
    weight: float
    status: BatchItemStatus = Field(
        description="tuned: tuned already when the batch was submitted (no job); otherwise "
        "the status of the job tuning it."
    )
    job_id: int | None
    budget: int | None = Field(description="The job's evaluations budget (null: no job).")
    evaluations: int = Field(description="Evaluations the job has spent.")
    best_latency_us: float | None = Field(description="The job's best so far (search time).")
    latency_us: float | None = Field(description="The stored tiling's latency, when tuned.")
    default_latency_us: float | None
    speedup: float | None = Field(description="The stored tiling's over the default.")
    error: str | None


class BatchTotals(_Out):
    workloads: int
    tuned: int = Field(description="Tuned already when submitted: not tuned again.")
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    budget: int = Field(description="Evaluations budgeted over the batch's jobs.")
    evaluations: int = Field(description="Evaluations spent so far.")


class BatchSummary(_Out):
    id: int
    name: str | None
    status: BatchStatus = Field(
        description="queued (no job started), running, then succeeded (every workload tuned) "
        "or failed (a job failed or was cancelled; the others ran to their end)."
    )
    done: bool = Field(description="No job of the batch is queued or running.")
    force: bool
    created_at: datetime
    totals: BatchTotals


class BatchPublic(BatchSummary):
    workloads: list[BatchItemPublic]


class BatchList(_Out):
    batches: list[BatchSummary]


class MissPublic(_Out):
    op: str
    target: str
    dtype: str
    shape: dict[str, int]
    count: int = Field(description="How often GET /v1/tilings was asked for it.")
    source: Literal["nearest", "default"] = Field(description="The rule of its latest answer.")
    tuned: bool = Field(description="Tuned since (at the op's current version).")
    first_at: datetime
    last_at: datetime


class MissList(_Out):
    misses: list[MissPublic]
    dropped: int = Field(
        description="Asks not recorded since the service started: new shapes past "
        "settings.max_miss_shapes."
    )
