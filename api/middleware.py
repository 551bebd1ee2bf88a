"""ASGI middleware that must see the raw request: the body size limit."""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before any route parses them.

    A declared ``Content-Length`` over the limit is refused at once; a body without one (chunked)
    is read up to the limit and refused as soon as it passes it. A body within the limit is
    buffered (it is small by definition) and replayed to the app.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            status_code=413,
            content={"detail": f"request body larger than {self.max_bytes} bytes"},
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = True  # an unparsable length is no length we accept
            if too_big:
                await self._refuse(scope, receive, send)
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
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
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
