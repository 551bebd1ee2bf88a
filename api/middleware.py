"""ASGI middleware that must see the raw request: the body size limit, the concurrency limit."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before any route parses them.

    ``limits`` gives some paths their own limit (a manifest of many shapes is larger than any
    other body). A declared ``Content-Length`` over the limit is refused at once; a body without
    one (chunked) is read up to the limit and refused as soon as it passes it. A body within the
    limit is buffered (it is small by definition) and replayed to the app.
    """

    def __init__(
        self, app: ASGIApp, *, max_bytes: int, limits: Mapping[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = dict(limits or {})

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = JSONResponse(
            status_code=413,
            content={"detail": f"request body larger than {limit} bytes"},
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope.get("path", ""), self.max_bytes)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > limit
            except ValueError:
                too_big = True  # an unparsable length is no length we accept
            if too_big:
                await self._refuse(scope, receive, send, limit)
                return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS") and declared is None:
            await self.app(scope, receive, send)
            return

        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await self._refuse(scope, receive, send, limit)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        buffered: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return buffered
            return await receive()

        await self.app(scope, replay, send)


class ConcurrencyLimit:
    """Run at most ``max_requests`` requests at once; the others wait their turn on the event
    loop, holding no thread.

    Sync routes run in anyio's thread pool (40 threads), and FastAPI validates a sync route's
    response in a second thread while the request's database session, with the locks it took
    (SQLite's write lock, PostgreSQL's row lock on a workload), is still open. When every thread
    waits for such a lock, its holder never gets the thread it needs to finish: a burst of job
    submissions would hang until the database's 30 s timeouts and end in 500s and 503s.
    Admitting fewer requests than there are threads always leaves it one.
    """

    def __init__(self, app: ASGIApp, *, max_requests: int) -> None:
        self.app = app
        self.max_requests = max_requests
        self._slots: anyio.Semaphore | None = None  # made in the event loop, on first use

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = anyio.Semaphore(self.max_requests)
        async with self._slots:
            await self.app(scope, receive, send)
