"""A workload's records as documents: JSON, and CSV in the replay format.

``tilewise records`` and ``GET /v1/workloads/{key}/records`` write them.

The JSON document (``format`` :data:`FORMAT`) holds the workload and every record, oldest first:
search evaluations, re-measures and predictions, failures included, each with its status,
source and (for a run that went well) median latency, spread and samples.

The CSV is a recorded space as ``tilewise tune replay --space FILE.csv`` reads it
(:class:`tilewise.search.ReplaySpace`): a column per tunable, then :data:`TIME_COLUMN`, one row
per tiling the search measured, with its median in milliseconds, or ``inf`` when its build
failed, its launch crashed or timed out, or its output was wrong. A tiling refused before it
ran (the static check, the spill and stack limits) is not a row: to the replay it breaks the
restrictions, as a tiling the search never tried. Re-measures (the same tilings, measured
again side by side) and predictions (never measured) are left out, so every time in the file
was taken the same way.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from tilewise.errors import InputError
from tilewise.status import RecordSource, RecordStatus
from tilewise.store import RecordRow, WorkloadRow

__all__ = ["FORMAT", "FORMATS", "TIME_COLUMN", "records_csv", "records_document"]

FORMAT = "tilewise.records"
FORMATS = ("csv", "json")
#: The last column of a recorded space: the time in milliseconds (``inf``: failed).
TIME_COLUMN = "time_ms"


def records_document(workload: WorkloadRow, records: Sequence[RecordRow]) -> dict[str, Any]:
    """The JSON document of ``workload`` and its ``records`` (see the module docstring)."""
    return {
        "format": FORMAT,
        "workload": {
            "key": workload.key,
            "op": workload.op,
            "op_version": workload.op_version,
            "target": workload.target,
            "dtype": workload.dtype,
            "shape": dict(workload.shape),
        },
        "records": [
            {
                "id": r.id,
                "tiling": dict(r.tiling),
                "status": r.status.value,
                "source": r.source.value,
                "latency_us": r.latency_us,
                "spread": r.spread,
                "samples_us": None if r.samples_us is None else list(r.samples_us),
                "error": r.error,
                "constraints": None if r.constraints is None else dict(r.constraints),
                "trial_number": r.trial_number,
                "job_id": r.job_id,
                "env": dict(r.env),
                "created_at": r.created_at.isoformat(),
            }
            for r in records
        ],
    }


def records_csv(workload: WorkloadRow, records: Sequence[RecordRow]) -> str:
    """``records`` as a recorded space (see the module docstring); the columns in the order
    of the op's tunables.

    Raises:
        InputError: no tiling of the workload ran or failed to run: no row to write (the replay
            refuses a space without one).
    """
    rows: dict[str, RecordRow] = {}
    for record in records:
        if record.source in (RecordSource.REMEASURE, RecordSource.PREDICTED):
            continue
        if record.status == RecordStatus.INFEASIBLE:
            continue
        rows.setdefault(record.tiling_key, record)  # the first measurement of each tiling
    if not rows:
        raise InputError(
            f"{workload.op} {workload.shape} {workload.dtype} on {workload.target}: no tiling "
            "was measured, so there is no space to replay"
        )
    names = _columns(workload, [r.tiling for r in rows.values()])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*names, TIME_COLUMN])
    for record in rows.values():
        time_ms = "inf"
        if record.status == RecordStatus.OK and record.latency_us is not None:
            time_ms = repr(record.latency_us / 1000)
        writer.writerow([*(record.tiling[n] for n in names), time_ms])
    return out.getvalue()


def _columns(workload: WorkloadRow, tilings: Sequence[Mapping[str, int]]) -> list[str]:
    """The tunables' names in the op's order (the order ``tilewise ops`` lists them); sorted
    for a workload of another version of the op (or of an op this code does not know)."""
    from tilewise.kernels.ops import OPS, get_op
    from tilewise.kernels.targets import get_target

    fields = set(tilings[0])
    if any(set(t) != fields for t in tilings):
        raise InputError(f"the records of workload {workload.key} do not share their fields")
    if workload.op not in OPS or get_op(workload.op).version != workload.op_version:
        return sorted(fields)
    target = get_target(workload.target)
    order = [t.name for t in get_op(workload.op).tunables(workload.shape, workload.dtype, target)]
    return order if set(order) == fields else sorted(fields)
