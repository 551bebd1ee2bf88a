"""The application factory: ``create_app(settings)``, what ``tilewise serve`` and uvicorn run.

The database is opened in the lifespan, once per process: a new database is migrated, one at
another revision is refused and the app does not start (the error names the command that fixes
it, ``tilewise db upgrade --db URL``). Everything else is wired here and nowhere else:
exception handlers (``tilewise.api.errors``), middleware (metrics outermost so that it also
counts the 413s and CORS answers, then CORS, then the body limit, then the concurrency limit),
routers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from tilewise import __version__
from tilewise.api import errors, routes
from tilewise.api.deps import write_refused
from tilewise.api.lookup import LookupCache, load_any_toolchain
from tilewise.api.metrics import Metrics, MetricsMiddleware
from tilewise.api.middleware import BodyLimit, ConcurrencyLimit
from tilewise.api.misses import MissRecorder
from tilewise.api.openapi import with_settings_bounds
from tilewise.errors import SchemaError
from tilewise.settings import Settings, get_settings
from tilewise.store import open_store

log = logging.getLogger(__name__)

DESCRIPTION = """\
Autotuning of the tiling parameters of fused Ascend C kernels.

Reads are open; writes (`POST`) need `Authorization: Bearer <token>` (settings.api_token),
except in dev mode. Invalid input is a 422 whose `detail[].loc` names the field at fault.
"""


#: Requests served at once (the rest queue without a thread): below the 40 threads sync routes
#: run in, so a request holding a database lock always finds the thread it needs to finish (see
#: tilewise.api.middleware.ConcurrencyLimit).
MAX_CONCURRENT_REQUESTS = 32


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new app serving ``settings`` (default: the process's settings)."""
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            store = await anyio.to_thread.run_sync(open_store, settings.db_url)
        except SchemaError as exc:
            log.error("refusing to start: %s", exc)
            raise
        app.state.store = store
        app.state.lookup = LookupCache(store)
        app.state.lookup_any = LookupCache(store, loader=load_any_toolchain)
        app.state.misses = MissRecorder(
            store, flush_s=settings.misses_flush_s, max_rows=settings.max_miss_shapes
        )
        app.state.misses.start()
        metrics.bind(store)
        if settings.dev_mode:
            log.warning("dev mode: write endpoints accept requests without a token")
        try:
            yield
        finally:
            metrics.bind(None)
            app.state.misses.stop()
            store.close()

    app = FastAPI(
        title="tilewise",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by routes.docs, from local assets
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    errors.install(app, write_refused)
    for module in (
        routes.jobs,
        routes.batches,
        routes.ops,
        routes.tilings,
        routes.workloads,
        routes.service,
        routes.dashboard,
    ):
        app.include_router(module.router)
    routes.docs.install(app)
    with_settings_bounds(app, max_budget=settings.max_budget)

    # Added innermost first.
    app.add_middleware(ConcurrencyLimit, max_requests=MAX_CONCURRENT_REQUESTS)
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        limits={"/v1/batches": settings.max_batch_bytes},
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
