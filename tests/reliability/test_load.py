"""Load on loopback: a real ``tilewise serve --workers 0`` (one API process, in a subprocess) and
an httpx client in this process.

* ``GET /v1/tilings`` at a fixed rate for 60 s (open loop: each request leaves at its scheduled
  time, however slow the previous ones were), half for tuned shapes (exact answers), half for
  untuned ones (nearest or default): no error, every request answered; the rate held, p50/p99
  and throughput are recorded for the reliability report (bench/reliability_report.py), not
  asserted: speed is for benchmarks, and these machines are shared.
* A burst of 1,000 concurrent ``POST /v1/jobs`` for 50 distinct workloads (20 each, shuffled):
  exactly 50 jobs exist afterwards (the database and ``GET /v1/jobs`` agree), and every answer
  for one workload names the same job. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.api._support import AUTH, TOKEN, seed_tuned
from tests.reliability._report import record
from tests.reliability._server import Served, pg_database, tilewise_serve
from tilewise.store import open_store

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

LOAD_SECONDS = 60.0
LOAD_RATE = 100.0  # requests per second
BURST = 1000
BURST_WORKLOADS = 50

TUNED = [{"N": 1 << k} for k in range(10, 22)]  # 1 Ki .. 2 Mi elements
UNTUNED = [{"N": 3000 + 7919 * i} for i in range(40)]


def seed(url: str) -> None:
    db = open_store(url)
    try:
        for shape in TUNED:
            seed_tuned(db, shape=shape)
    finally:
        db.close()


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    tmp = tmp_path_factory.mktemp("load-sqlite")
    url = f"sqlite:///{tmp / 'tilewise.db'}"
    seed(url)
    with tilewise_serve(tmp, db_url=url, token=TOKEN) as served:
        yield served, url


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class Run:
    latencies_ms: list[float] = field(default_factory=list)
    lateness_ms: list[float] = field(default_factory=list)  # sent after its scheduled time
    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return len(self.latencies_ms) + len(self.errors)


async def _fixed_rate(base: str, rate: float, seconds: float) -> Run:
    run = Run()
    rng = random.Random(7)
    count = int(rate * seconds)
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base, timeout=30.0, limits=limits) as client:

        async def one(due: float, shape: dict[str, int]) -> None:
            run.lateness_ms.append((time.perf_counter() - due) * 1000)
            start = time.perf_counter()
            try:
                r = await client.get(
                    "/v1/tilings/scale_relu_dropout", params={"shape": f"N={shape['N']}"}
                )
            except httpx.HTTPError as exc:
                run.errors.append(f"{type(exc).__name__}: {exc}")
                return
            run.latencies_ms.append((time.perf_counter() - start) * 1000)
            run.statuses[r.status_code] += 1
            if r.status_code != 200 or "tiling" not in r.json():
                run.errors.append(f"{r.status_code} {r.text[:200]}")
                return
            expected = "exact" if shape in TUNED else ("nearest", "default")
            if r.json()["source"] not in expected:
                run.errors.append(f"N={shape['N']}: source {r.json()['source']}")

        tasks = []
        t0 = time.perf_counter()
        for i in range(count):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            shape = rng.choice(TUNED) if i % 2 == 0 else rng.choice(UNTUNED)
            tasks.append(asyncio.create_task(one(due, shape)))
        await asyncio.gather(*tasks)
        run.seconds = time.perf_counter() - t0
    return run


def test_tilings_at_a_fixed_rate_for_60_s(sqlite_server: tuple[Served, str]) -> None:
    served, _ = sqlite_server
    run = asyncio.run(_fixed_rate(served.url, LOAD_RATE, LOAD_SECONDS))
    rps = run.total / run.seconds
    figures = {
        "database": "sqlite",
        "seconds": round(run.seconds, 1),
        "rate_asked": LOAD_RATE,
        "requests": run.total,
        "errors": len(run.errors),
        "rps": round(rps, 1),
        "p50_ms": round(percentile(run.latencies_ms, 50), 2),
        "p99_ms": round(percentile(run.latencies_ms, 99), 2),
        "max_ms": round(max(run.latencies_ms), 1),
        "late_p99_ms": round(percentile(run.lateness_ms, 99), 2),
    }
    record("load: GET /v1/tilings at a fixed rate", **figures)
    print(figures)
    assert run.errors == [], run.errors[:5]
    assert run.total == int(LOAD_RATE * LOAD_SECONDS)
    assert run.statuses == {200: run.total}
    assert "Traceback" not in served.output()


# ---------------------------------------------------------------------------------------------
# The burst


def burst_bodies() -> list[dict[str, object]]:
    bodies = [
        {"op": "scale_relu_dropout", "shape": {"N": 100_000 + i}, "budget": 5}  # none tuned
        for i in range(BURST_WORKLOADS)
        for _ in range(BURST // BURST_WORKLOADS)
    ]
    random.Random(11).shuffle(bodies)
    return bodies


async def _burst(
    base: str, bodies: list[dict[str, object]]
) -> tuple[list[httpx.Response | str], float]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=120.0, limits=limits) as client:
        start = asyncio.Event()

        async def one(body: dict[str, object]) -> httpx.Response | str:
            await start.wait()  # every request is ready: they leave together
            try:
                return await client.post("/v1/jobs", json=body, headers=AUTH)
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__}: {exc}"

        tasks = [asyncio.create_task(one(b)) for b in bodies]
        await asyncio.sleep(0.1)
        t0 = time.perf_counter()
        start.set()
        answers = await asyncio.gather(*tasks)
        return list(answers), time.perf_counter() - t0


def run_burst(served: Served, engine: Engine, database: str) -> None:
    bodies = burst_bodies()
    answers, seconds = asyncio.run(_burst(served.url, bodies))
    errors = [a for a in answers if isinstance(a, str)]
    statuses = Counter(a.status_code for a in answers if not isinstance(a, str))
    ids: dict[int, set[int]] = {}
    for body, answer in zip(bodies, answers, strict=True):
        if not isinstance(answer, str) and answer.status_code == 202:
            n = body["shape"]["N"]  # type: ignore[index]
            ids.setdefault(n, set()).add(answer.json()["id"])
    listed = httpx.get(f"{served.url}/v1/jobs", params={"limit": 1000}, timeout=30).json()["jobs"]
    with engine.connect() as connection:
        in_db = connection.execute(sa.text("SELECT count(*) FROM tw_jobs")).scalar_one()
    figures = {
        "database": database,
        "requests": len(bodies),
        "workloads": BURST_WORKLOADS,
        "errors": len(errors) + sum(n for s, n in statuses.items() if s != 202),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "jobs_created": in_db,
        "seconds": round(seconds, 2),
        "rps": round(len(bodies) / seconds, 1),
    }
    record("load: burst of concurrent POST /v1/jobs", **figures)
    print(figures)
    assert errors == [], errors[:5]
    assert statuses == {202: BURST}, figures
    assert in_db == BURST_WORKLOADS, figures
    assert len(listed) == BURST_WORKLOADS
    assert {len(v) for v in ids.values()} == {1}, "one workload answered with two jobs"
    assert sorted(j for v in ids.values() for j in v) == sorted(j["id"] for j in listed)
    assert "Traceback" not in served.output()


def test_burst_of_job_submissions_sqlite(sqlite_server: tuple[Served, str]) -> None:
    served, url = sqlite_server
    engine = sa.create_engine(url)
    try:
        run_burst(served, engine, "sqlite")
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_burst_of_job_submissions_postgres(pg_admin: Engine, tmp_path: Path) -> None:
    with pg_database(pg_admin) as url:
        seed(url)
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            with tilewise_serve(tmp_path, db_url=url, token=TOKEN) as served:
                run_burst(served, engine, "postgresql")
        finally:
            engine.dispose()
