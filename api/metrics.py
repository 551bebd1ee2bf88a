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
``tilewise_database_up``                           gauge      — (0: the gauges above are absent)
=================================================  =========  ==================================
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tilewise.errors import StoreError
from tilewise.store import (
    JobStatus,
    Store,
    count_jobs_by_status,
    count_tilings,
    count_workloads,
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
