"""What a worker needs to know of a claimed job before it tunes: the checked workload, or why
the job cannot run; and the worker's own id."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from tilewise import store
from tilewise.errors import InputError, TilewiseError
from tilewise.settings import Settings

if TYPE_CHECKING:
    from tilewise.kernels.request import WorkloadRequest


class JobError(TilewiseError):
    """A job cannot be run as asked (unknown op, stale op version ...): it fails."""


def worker_id_for(target: str, device: int | None) -> str:
    """``host:pid:target:device`` (device ``-`` when none is given)."""
    dev = "-" if device is None else str(device)
    return f"{socket.gethostname()}:{os.getpid()}:{target}:{dev}"


def job_inputs(workload: store.WorkloadRow, *, settings: Settings) -> WorkloadRequest:
    """The op spec, shape, dtype and target of a job's workload.

    Raises:
        JobError: the op, dtype or target is unknown, the shape is not valid for the op, or the
            op changed since the job was queued (its version differs).
    """
    from tilewise.kernels.request import resolve_request

    try:
        asked = resolve_request(
            workload.op,
            workload.shape,
            workload.dtype,
            workload.target,
            max_elements=settings.max_elements,
        )
    except InputError as exc:
        raise JobError(f"workload {workload.key}: {exc}") from exc
    spec, target = asked.spec, asked.target
    if spec.version != workload.op_version:
        raise JobError(
            f"workload {workload.key}: op {spec.name} is at version {spec.version}, the job asks"
            f" for version {workload.op_version} (the kernel or its spec changed since the job"
            " was queued); queue a new job for the current version"
        )
    if target.name != workload.target:
        raise JobError(
            f"workload {workload.key}: target {workload.target!r} resolves to {target.name!r}"
        )
    return asked
