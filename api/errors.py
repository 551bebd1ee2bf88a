"""Where domain errors become HTTP errors: the only place.

* request validation (pydantic), a body that is not JSON, :class:`FieldError` (an
  InputError naming its field) and any other :class:`~tilewise.errors.InputError` → **422**
  ``{"detail": [{"loc", "msg", "type"}]}``, ``loc`` naming the field at fault
  (``["body", "budget"]``, ``["query", "shape"]``; empty when the error cannot say);
* :class:`NotFound` → **404** ``{"detail": "..."}``;
* :class:`~tilewise.errors.StoreError` (database unreachable or refusing), and a driver error that
  escaped translation → **503** with ``Retry-After``;
* any other :class:`~tilewise.errors.TilewiseError` → **500**.

A write route that refuses the caller answers **401** (or 403) also when the body is not JSON.

A :class:`~tilewise.errors.SchemaError` at startup is not handled here: the app refuses to start
(see ``tilewise.api.app``). One met later (someone migrated the database under a running API) is a
StoreError like any other: 503.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException

from tilewise.errors import InputError, StoreError, TilewiseError

log = logging.getLogger(__name__)

Loc = Sequence[str | int]


class NotFound(TilewiseError):
    """The thing a path names does not exist."""


class FieldError(InputError):
    """An InputError that knows which request field is at fault, e.g. ``("body", "budget")``."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


class _ErrorResponse(JSONResponse):
    """A JSON error answer in ASCII. Messages echo what the client sent, which may hold a lone
    surrogate (``"\\ud800"`` is valid JSON, but no UTF-8), on which Starlette's UTF-8 rendering
    raises (a 500 for a 422). Escaped, it goes back as sent."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _detail(loc: Loc, message: str) -> list[dict[str, object]]:
    return [{"loc": list(loc), "msg": message, "type": "value_error"}]


#: Whether a write route refuses a request before its body (tilewise.api.deps.write_refused).
Refusal = Callable[[Request], Awaitable[HTTPException | None]]


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    refused = await _refusal(request)
    if refused is not None:
        return await http_exception_handler(request, refused)
    errors = [
        {
            "loc": list(e.get("loc", ())),
            # pydantic prefixes the message of a ValueError raised in a validator.
            "msg": str(e.get("msg", "")).removeprefix("Value error, "),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    return _ErrorResponse(status_code=422, content={"detail": jsonable_encoder(errors)})


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
        refused = await _refusal(request)
        if refused is not None:
            return await http_exception_handler(request, refused)
        # FastAPI answers a JSON body that json.loads refuses with something else than a
        # JSONDecodeError (not UTF-8, an integer of thousands of digits, nesting too deep) with a
        # bare 400 "There was an error parsing the body", where any other undecodable JSON is a
        # 422 on the body. Same input fault, same answer.
        message = f"body is not valid JSON: {exc.__cause__}"
        return _ErrorResponse(status_code=422, content={"detail": _detail(("body",), message)})
    return await http_exception_handler(request, exc)


async def _input(request: Request, exc: Exception) -> _ErrorResponse:
    loc: Loc = exc.loc if isinstance(exc, FieldError) else ()
    return _ErrorResponse(status_code=422, content={"detail": _detail(loc, str(exc))})


async def _not_found(request: Request, exc: Exception) -> _ErrorResponse:
    return _ErrorResponse(status_code=404, content={"detail": str(exc)})


async def _store(request: Request, exc: Exception) -> _ErrorResponse:
    log.warning("database unavailable: %s", exc)
    return _ErrorResponse(
        status_code=503, content={"detail": f"database unavailable: {exc}"}, headers=_retry()
    )


async def _dbapi(request: Request, exc: Exception) -> _ErrorResponse:
    # A driver error that escaped the store's own translation (e.g. from a library opening its
    # own connection): still the database, still 503, and never the URL's password.
    assert isinstance(exc, DBAPIError)
    log.warning("database error: %s", exc.orig)
    return _ErrorResponse(
        status_code=503,
        content={"detail": f"database unavailable: {type(exc.orig).__name__}"},
        headers=_retry(),
    )


async def _tilewise(request: Request, exc: Exception) -> _ErrorResponse:
    log.error("unhandled tilewise error on %s: %s", request.url.path, exc)
    return _ErrorResponse(status_code=500, content={"detail": str(exc)})


def _retry() -> dict[str, str]:
    return {"Retry-After": "5"}


async def _refusal(request: Request) -> HTTPException | None:
    refusal: Refusal | None = getattr(request.app.state, "write_refused", None)
    return None if refusal is None else await refusal(request)


def install(app: FastAPI, write_refused: Refusal | None = None) -> None:
    """Register every handler on ``app``; ``write_refused`` answers first for a body FastAPI
    could not parse (it parses a body before the route's dependencies check the writer)."""
    app.state.write_refused = write_refused
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(InputError, _input)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(StoreError, _store)
    app.add_exception_handler(DBAPIError, _dbapi)
    app.add_exception_handler(TilewiseError, _tilewise)


__all__ = ["FieldError", "NotFound", "install"]
