"""Prometheus metrics: HTTP requests (middleware) and the queue's state (read at scrape time).

Each app has its own registry, so several apps in one process (tests) never collide.

=================================================  =========  ==================================
metric                                             type       labels
=================================================  =========  ==================================
``tilewise_http_requests_total``                   counter    method, route (template), status
``tilewise_http_request_duration_seconds``         histogram  method, route
``tilewise_jobs``                                  gauge      status (every status, 0 included)
``tilewise_workloads``                             gauge      —
``tilewise_workloads_tuned``                       gauge      —
``tilewise_queued_jobs``                            gauge      target (every target, 0 included)
``tilewise_evaluations_total``                     counter    status (every status, 0 included)
``tilewise_evaluation_seconds``                    summary    target (``_sum`` and ``_count``)
``tilewise_database_up``                           gauge      — (0: the gauges above are absent)
=================================================  =========  ==================================

The tuning metrics come from the database, as the workers that tune write it, so one scrape of
the API sees every worker's: ``tilewise_evaluations_total`` counts the tilings the searches
tried by outcome (``infeasible``: refused before a build; re-measures left out);
``tilewise_evaluation_seconds`` adds up, per target, the wall time of the jobs that ran (to now
for a running one) as ``_sum`` and their evaluations as ``_count``, so that
``rate(_sum) / rate(_count)`` is the time one evaluation takes in a tuning run (its build,
launches and the search's own work); ``tilewise_queued_jobs`` is the queue's depth per target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tilewise.errors import StoreError
from tilewise.kernels.targets import target_names
from tilewise.store import (
    JobStatus,
    RecordStatus,
    Store,
    count_evaluations_by_status,
    count_jobs_by_status,
    count_tilings,
    count_workloads,
    job_time_by_target,
    queued_jobs_by_target,
    session_scope,
)

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _StoreCollector(Collector):
    def __init__(self) -> None:
        self.store: Store | None = None

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("tilewise_database_up", "1 if the database answered the scrape.")
        if self.store is None:  # not started yet, or shut down
            up.add_metric([], 0)
            yield up
            return
        try:
            with session_scope(self.store) as session:
                by_status = count_jobs_by_status(session)
                n_workloads = count_workloads(session)
                n_tuned = count_tilings(session)
                queued = queued_jobs_by_target(session)
                evaluations = count_evaluations_by_status(session)
                job_time = job_time_by_target(session)
        except StoreError as exc:
            log.warning("metrics: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily("tilewise_jobs", "Tuning jobs by status.", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([status.value], by_status.get(status, 0))
        yield jobs
        yield GaugeMetricFamily("tilewise_workloads", "Workloads known.", value=n_workloads)
        yield GaugeMetricFamily(
            "tilewise_workloads_tuned", "Workloads with a tiling in the table.", value=n_tuned
        )
        depth = GaugeMetricFamily(
            "tilewise_queued_jobs", "Jobs waiting for a worker, by target.", labels=["target"]
        )
        for target in sorted({*target_names(), *queued}):
            depth.add_metric([target], queued.get(target, 0))
        yield depth
        tried = CounterMetricFamily(
            "tilewise_evaluations",
            "Tilings the searches tried, by outcome (infeasible: refused before a build).",
            labels=["status"],
        )
        for outcome in RecordStatus:
            tried.add_metric([outcome.value], evaluations.get(outcome, 0))
        yield tried
        spent = SummaryMetricFamily(
            "tilewise_evaluation_seconds",
            "Wall time of tuning jobs (sum) over their evaluations (count), by target.",
            labels=["target"],
        )
        for target, (seconds, count) in sorted(job_time.items()):
            spent.add_metric([target], count_value=count, sum_value=seconds)
        yield spent


class Metrics:
    """The registry of one app and its instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "tilewise_http_requests",
            "HTTP requests by route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tilewise_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route"],
            registry=self.registry,
        )
        self._store = _StoreCollector()
        self.registry.register(self._store)

    def bind(self, store: Store | None) -> None:
        """Read the queue's gauges from ``store`` (None: report the database as down)."""
        self._store.store = store

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Count and time every HTTP request, labelled by its route template (bounded cardinality:
    an unmatched path is ``<unmatched>``)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - start)
