"""Where domain errors become HTTP errors: the only place.

* request validation (pydantic), :class:`FieldError` (an InputError naming its field) and any
  other :class:`~tuner.errors.InputError` → **422** ``{"detail": [{"loc", "msg", "type"}]}``,
  ``loc`` naming the field at fault (``["body", "budget"]``, ``["query", "shape"]``; empty when
  the error cannot say);
* :class:`NotFound` → **404** ``{"detail": "..."}``;
* :class:`~tuner.errors.StoreError` (database unreachable or refusing), and a driver error that
  escaped translation → **503** with ``Retry-After``;
* any other :class:`~tuner.errors.TilewiseError` → **500**.

A :class:`~tuner.errors.SchemaError` at startup is not handled here: the app refuses to start
(see ``api.app``). One met later (someone migrated the database under a running API) is a
StoreError like any other: 503.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from tuner.errors import InputError, StoreError, TilewiseError

log = logging.getLogger(__name__)

Loc = Sequence[str | int]


class NotFound(TilewiseError):
    """The thing a path names does not exist."""


class FieldError(InputError):
    """An InputError that knows which request field is at fault, e.g. ``("body", "budget")``."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


def _detail(loc: Loc, message: str) -> list[dict[str, object]]:
    return [{"loc": list(loc), "msg": message, "type": "value_error"}]


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": list(e.get("loc", ())),
            # pydantic prefixes the message of a ValueError raised in a validator.
            "msg": str(e.get("msg", "")).removeprefix("Value error, "),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})


async def _input(request: Request, exc: Exception) -> JSONResponse:
    loc: Loc = exc.loc if isinstance(exc, FieldError) else ()
    return JSONResponse(status_code=422, content={"detail": _detail(loc, str(exc))})


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=404, content={"detail": str(exc)})


async def _store(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", exc)
    return JSONResponse(
        status_code=503, content={"detail": f"database unavailable: {exc}"}, headers=_retry()
    )


async def _dbapi(request: Request, exc: Exception) -> JSONResponse:
    # A driver error that escaped the store's own translation (e.g. from a library opening its
    # own connection): still the database, still 503, and never the URL's password.
    assert isinstance(exc, DBAPIError)
    log.warning("database error: %s", exc.orig)
    return JSONResponse(
        status_code=503,
        content={"detail": f"database unavailable: {type(exc.orig).__name__}"},
        headers=_retry(),
    )


async def _tilewise(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled tilewise error on %s: %s", request.url.path, exc)
    return JSONResponse(status_code=500, content={"detail": str(exc)})


def _retry() -> dict[str, str]:
    return {"Retry-After": "5"}


def install(app: FastAPI) -> None:
    """Register every handler on ``app``."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(InputError, _input)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(StoreError, _store)
    app.add_exception_handler(DBAPIError, _dbapi)
    app.add_exception_handler(TilewiseError, _tilewise)


__all__ = ["FieldError", "NotFound", "install"]
