"""Helpers of the API tests: settings, a seeded tuned workload, a live uvicorn server."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from tests_support import host_toolchain

from tilewise import store
from tilewise.api import create_app
from tilewise.kernels.ops import get_op
from tilewise.kernels.ops._base import Tunable
from tilewise.kernels.targets import get_target
from tilewise.settings import Settings
from tilewise.store import Store, WorkloadRow
from tilewise.types import Shape, Tiling, Toolchain, Workload

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(db_url: str, **changes: Any) -> Settings:
    values: dict[str, Any] = {"db_url": db_url, "api_token": TOKEN, "dev_mode": False}
    values.update(changes)
    # _env_file=None: a developer's .env must not change what the tests see.
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass(frozen=True)
class Seeded:
    workload: WorkloadRow
    best: Tiling
    best_us: float
    default_us: float
    latencies: tuple[float, ...]  # the ok, non-remeasure records in order


def seed_tuned(
    db: Store,
    *,
    op: str = "scale_relu_dropout",
    shape: dict[str, int] | None = None,
    dtype: str = "float32",
    target: str = "cpu-twin",
    latencies: tuple[float, ...] = (40.0, 55.0, 31.0, 33.0, 24.0, 26.0),
    toolchain: Toolchain | None = None,
) -> Seeded:
    """A tuned workload as a tuning run leaves it: search records (one failed), a re-measure
    of the best, and its tiling-table entry; measured with ``toolchain`` (default: this
    host's, whose entries the service serves)."""
    toolchain = toolchain or host_toolchain()
    spec, profile = get_op(op), get_target(target)
    parsed = Shape(shape or {"N": 65536})
    default = spec.default_tiling(parsed, dtype, profile)
    with store.session_scope(db) as session:
        row = store.commit_workload(
            session, Workload(spec.name, spec.version, profile.name, dtype, parsed)
        )
        env = {"host": "test"}
        records = []
        variants = (
            t
            for t in _one_field_changes(spec.tunables(parsed, dtype, profile), default)
            if spec.valid(t, parsed, dtype, profile)
        )
        # A tiny workload may have fewer tilings than latencies: it gets fewer records.
        tilings = [default, *itertools.islice(variants, len(latencies) - 1)]
        latencies = latencies[: len(tilings)]
        for i, (tiling, latency) in enumerate(zip(tilings, latencies, strict=True)):
            records.append(
                store.add_record(
                    session,
                    toolchain=toolchain,
                    workload_id=row.id,
                    tiling=tiling,
                    status="ok",
                    latency_us=latency,
                    source="default" if i == 0 else "search",
                    trial_number=i,
                    env=env,
                )
            )
            if i == 1:
                store.add_record(
                    session,
                    toolchain=toolchain,
                    workload_id=row.id,
                    tiling=tiling,
                    status="build_failed",
                    error="spills",
                    source="search",
                    env=env,
                )
        best = min(records, key=lambda r: r.latency_us or 0.0)
        remeasured = store.add_record(
            session,
            toolchain=toolchain,
            workload_id=row.id,
            tiling=best.tiling,
            status="ok",
            latency_us=1.0,  # far below: must not show in the tuning curve
            source="remeasure",
            env=env,
        )
        assert best.latency_us is not None
        store.upsert_tiling(
            session,
            toolchain=toolchain,
            workload_id=row.id,
            record_id=remeasured.id,
            tiling=best.tiling,
            latency_us=best.latency_us,
            default_latency_us=latencies[0],
            speedup=latencies[0] / best.latency_us,
            evaluations=len(latencies) + 1,
        )
    return Seeded(row, best.tiling, best.latency_us, latencies[0], latencies)


def _one_field_changes(tunables: list[Tunable], default: Tiling) -> Iterator[Tiling]:
    """Tilings within the workload's domains, each the default with one field changed (every
    seeded record has its own tiling, and the stored one loads into a tiling table)."""
    for tunable in tunables:
        for value in tunable.values:
            if value != default[tunable.name]:
                yield default.replace(**{tunable.name: value})


# ---------------------------------------------------------------------------------------------
# A real server (uvicorn on a free loopback port, in a thread)


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` with uvicorn on 127.0.0.1; yields the base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
