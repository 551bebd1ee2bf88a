"""Reusable dependencies: settings, the store, a session per request, the writer check, and the
workload a request names (validated, with settings' bounds).

The app keeps its state on ``app.state`` (set up in ``tilewise.api.app``): ``settings``, ``store``,
``lookup`` (the in-memory tiling table), ``misses`` (the shapes it answered without an exact
entry) and ``metrics``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from tilewise.api.errors import FieldError, NotFound
from tilewise.api.lookup import LookupCache
from tilewise.api.misses import MissRecorder
from tilewise.api.openapi import SHAPE_DESCRIPTION, enums, shape_query_schema
from tilewise.api.schemas import JobCreate
from tilewise.errors import InputError, did_you_mean
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.request import (
    KeyTwice,
    RequestError,
    WorkloadRequest,
    once_each,
    resolve_request,
)
from tilewise.kernels.targets import get_target
from tilewise.settings import Settings
from tilewise.store import Store, session_scope
from tilewise.types import DTYPE_ALIASES, DTYPES, Shape


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


AnyToolchainQuery = Annotated[
    bool,
    Query(
        description="Also tilings measured with another toolchain than the service host's "
        "(another compiler, twin headers, CANN or target profile): stale, left out by default; "
        "they stand in for workloads not tuned with the current one.",
    ),
]


def get_lookup(request: Request, any_toolchain: AnyToolchainQuery = False) -> LookupCache:
    # Two tables in memory: this host's toolchain's entries, and (loaded when first asked)
    # those with any toolchain's standing in where a workload has none of this one.
    lookup: LookupCache = (
        request.app.state.lookup_any if any_toolchain else request.app.state.lookup
    )
    return lookup


async def get_misses(request: Request) -> MissRecorder:
    # async: a sync dependency would cost every GET /v1/tilings a trip to the thread pool.
    misses: MissRecorder = request.app.state.misses
    return misses


SettingsDep = Annotated[Settings, Depends(get_settings)]
MissesDep = Annotated[MissRecorder, Depends(get_misses)]
StoreDep = Annotated[Store, Depends(get_store)]
LookupDep = Annotated[LookupCache, Depends(get_lookup)]


def get_session(store: StoreDep) -> Iterator[Session]:
    """One session per request; committed before the response is sent (scope="function"), so a
    client that got 202 finds its job, and a failed commit is a 503, not a lost write."""
    with session_scope(store) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="settings.api_token")


def require_writer(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """Allow a write: in dev mode anyone, otherwise ``Authorization: Bearer <api_token>``.

    Returns who is writing ("dev" or "token"). Without a configured token (and not in dev mode)
    writes are refused: there is no default token.
    """
    if settings.dev_mode:
        return "dev"
    if not settings.api_token:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "writes are disabled: the server has no api_token (set TILEWISE_API_TOKEN)",
        )
    given = "" if credentials is None else credentials.credentials
    if credentials is None or not hmac.compare_digest(given.encode(), settings.api_token.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or invalid bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return "token"


#: Put first in a write route's signature: it runs before the body is validated.
WriteAuth = Annotated[str, Depends(require_writer)]


async def write_refused(request: Request) -> HTTPException | None:
    """What :func:`require_writer` answers a write route's ``request`` (None: the write is
    allowed, or the route takes none). FastAPI parses a JSON body before any dependency runs:
    the error handlers ask this first, so that an anonymous caller with a malformed body is
    told 401, as with any other body."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None or not any(d.call is require_writer for d in dependant.dependencies):
        return None
    try:
        require_writer(get_settings(request), await _bearer(request))
    except HTTPException as refused:
        return refused
    return None


async def body_keys_once(request: Request) -> None:
    """Refuse a JSON body that gives a key twice in one object: json.loads (and so FastAPI)
    keeps the last value silently, where the CLI's manifests refuse it (``once_each``)."""
    try:
        json.loads(await request.body(), object_pairs_hook=once_each)
    except KeyTwice as exc:
        raise FieldError(("body",), str(exc)) from None
    except (ValueError, RecursionError):
        pass  # no JSON FastAPI took: it has answered already


#: Put after WriteAuth in a write route's signature that takes a JSON body.
BodyKeysOnce = Annotated[None, Depends(body_keys_once)]


# ---------------------------------------------------------------------------------------------
# The workload a request names


@dataclass(frozen=True)
class TuneRequest:
    what: WorkloadRequest
    budget: int
    seconds: float | None
    force: bool


@contextmanager
def blame(*loc: str) -> Iterator[None]:
    """Report an InputError raised in the block as a 422 on the field at ``loc``."""
    try:
        yield
    except FieldError:
        raise
    except InputError as exc:
        raise FieldError(loc, str(exc)) from exc


def tune_request(body: JobCreate, settings: SettingsDep) -> TuneRequest:
    budget = settings.default_budget if body.budget is None else body.budget
    if not 1 <= budget <= settings.max_budget:
        raise FieldError(
            ("body", "budget"), f"budget must be between 1 and {settings.max_budget}, got {budget}"
        )
    what = _resolve("body", body.op, Shape(body.shape), body.dtype, body.target, settings)
    return TuneRequest(what, budget, body.seconds, body.force)


TuneRequestDep = Annotated[TuneRequest, Depends(tune_request)]


def op_spec(
    op: Annotated[
        str,
        Path(description="Op name, see GET /v1/ops.", json_schema_extra={"enum": enums()["op"]}),
    ],
) -> OpSpec:
    try:
        return get_op(op)
    except InputError as exc:
        raise NotFound(str(exc)) from exc


OpDep = Annotated[OpSpec, Depends(op_spec)]


def _resolve(
    where: str, op: str | OpSpec, shape: str | Shape, dtype: str, target: str, settings: Settings
) -> WorkloadRequest:
    """:func:`resolve_request`; its error is a 422 on the field at fault, in ``where``."""
    try:
        return resolve_request(op, shape, dtype, target, max_elements=settings.max_elements)
    except RequestError as exc:
        raise FieldError((where, exc.field), str(exc)) from exc


ShapeQuery = Annotated[
    str, Query(description=SHAPE_DESCRIPTION, json_schema_extra=shape_query_schema())
]
DtypeQuery = Annotated[
    str, Query(description="One of the op's dtypes.", json_schema_extra={"enum": enums()["dtype"]})
]
TargetQuery = Annotated[
    str, Query(description="See GET /v1/targets.", json_schema_extra={"enum": enums()["target"]})
]


def workload_query(
    spec: OpDep,
    settings: SettingsDep,
    shape: ShapeQuery,
    dtype: DtypeQuery = "float32",
    target: TargetQuery = "cpu-twin",
) -> WorkloadRequest:
    """The workload named by ``/{op}?shape=&dtype=&target=``; each bad field is a 422 naming it."""
    return _resolve("query", spec, shape, dtype, target, settings)


WorkloadQueryDep = Annotated[WorkloadRequest, Depends(workload_query)]

#: The shape an op's search space is shown for when none is given.
EXAMPLE_DIM = 1024


def space_query(
    spec: OpDep,
    settings: SettingsDep,
    shape: Annotated[
        str | None,
        Query(
            description=f"{SHAPE_DESCRIPTION} Default: every dim {EXAMPLE_DIM}.",
            json_schema_extra=shape_query_schema(),
        ),
    ] = None,
    dtype: DtypeQuery = "float32",
    target: TargetQuery = "cpu-twin",
) -> WorkloadRequest:
    """Like :func:`workload_query` with an optional shape: runtime tunables' domains depend on
    the shape and target, so the search space is always shown for one."""
    asked = Shape({d: EXAMPLE_DIM for d in spec.dims}) if shape is None else shape
    return _resolve("query", spec, asked, dtype, target, settings)


SpaceQueryDep = Annotated[WorkloadRequest, Depends(space_query)]


@dataclass(frozen=True)
class TableFilters:
    target: str | None
    dtype: str | None


def table_filters(
    target: Annotated[
        str | None,
        Query(description="Only this target.", json_schema_extra={"enum": enums()["target"]}),
    ] = None,
    dtype: Annotated[
        str | None,
        Query(description="Only this dtype.", json_schema_extra={"enum": enums()["dtype"]}),
    ] = None,
) -> TableFilters:
    if target is not None:
        with blame("query", "target"):
            target = get_target(target).name
    if dtype is not None and dtype not in DTYPES:
        hint = did_you_mean(dtype, DTYPES, aliases=DTYPE_ALIASES)
        raise FieldError(
            ("query", "dtype"), f"unknown dtype {dtype!r}{hint}; one of {', '.join(DTYPES)}"
        )
    return TableFilters(target, dtype)


TableFiltersDep = Annotated[TableFilters, Depends(table_filters)]
