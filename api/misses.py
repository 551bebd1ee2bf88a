"""The shapes ``GET /v1/tilings`` answered without an exact entry: counted in memory on the
lookup path (a dict update under a lock, no database write), added to ``tw_misses`` in batches
by a background thread every ``settings.misses_flush_s`` seconds, before ``GET /v1/misses``
answers, and at shutdown.

A flush that fails (the database is away) keeps its counts for the next one. At most
``MAX_PENDING`` shapes wait in memory; asks of further new ones are dropped and counted, as are
those the bounded table refuses (:func:`tilewise.store.record_misses`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from tilewise import store
from tilewise.api.errors import FieldError, NotFound
from tilewise.api.schemas import MissList, MissPublic
from tilewise.errors import InputError, StoreError
from tilewise.kernels.backends import current_toolchain_ids
from tilewise.kernels.ops import OPS, get_op
from tilewise.manifest import manifest_of
from tilewise.store import MissRow, Store
from tilewise.types import Shape

log = logging.getLogger(__name__)

#: Distinct shapes counted in memory between two flushes, at most.
MAX_PENDING = 10_000


class MissRecorder:
    """Thread-safe; see the module docstring."""

    def __init__(self, db: Store, *, flush_s: float, max_rows: int) -> None:
        self.db, self.flush_s, self.max_rows = db, flush_s, max_rows
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time
        self._pending: dict[tuple[str, str, str, str], list[Any]] = {}
        #: Asks not recorded: past MAX_PENDING in memory, or past max_rows in the table.
        self.dropped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(
        self, op: str, target: str, dtype: str, shape: Mapping[str, int], source: str
    ) -> None:
        """Count one answer of ``source`` (nearest, default) for the shape."""
        key = (op, target, dtype, Shape(shape).key())
        now = datetime.now(UTC)
        with self._lock:
            seen = self._pending.get(key)
            if seen is not None:
                seen[0] += 1
                seen[1], seen[3] = source, now
            elif len(self._pending) < MAX_PENDING:
                self._pending[key] = [1, source, dict(shape), now, now]
            else:
                self.dropped += 1

    def flush(self) -> None:
        """Add the counts so far to the database.

        Raises:
            StoreError: the database cannot be used (the counts wait for the next flush).
        """
        with self._flushing:
            with self._lock:
                taken, self._pending = self._pending, {}
            if not taken:
                return
            rows = [
                MissRow(op, target, dtype, Shape(shape), n, source, first, last)
                for (op, target, dtype, _), (n, source, shape, last, first) in taken.items()
            ]
            try:
                with store.session_scope(self.db) as session:
                    dropped = store.record_misses(session, misses=rows, max_rows=self.max_rows)
            except BaseException:
                self._restore(taken)
                raise
            with self._lock:
                self.dropped += dropped

    def _restore(self, taken: dict[tuple[str, str, str, str], list[Any]]) -> None:
        with self._lock:
            for key, (n, source, shape, last, first) in taken.items():
                seen = self._pending.get(key)
                if seen is not None:  # asked again meanwhile: the older counts join it
                    seen[0] += n
                    seen[4] = min(seen[4], first)
                elif len(self._pending) < MAX_PENDING:
                    self._pending[key] = [n, source, shape, last, first]
                else:
                    self.dropped += n

    # -- the background flusher -------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tw-misses", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self._flush_quietly()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except StoreError as exc:
            log.warning("shapes asked without an exact entry not recorded yet: %s", exc)

    def stop(self) -> None:
        """Stop the flusher and flush what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._flush_quietly()


def listing(
    session: Session,
    recorder: MissRecorder,
    *,
    op: str | None,
    target: str | None,
    dtype: str | None,
    include_tuned: bool,
    limit: int,
    manifest: Mapping[str, int | None] | None,
) -> MissList | JSONResponse:
    """``GET /v1/misses``: the recorded misses (after a flush of those in memory), or a tuning
    manifest of them. Called before the request's session has begun a transaction (SQLite:
    the flush's own transaction would wait for it)."""
    recorder.flush()
    versions = {name: get_op(name).version for name in OPS}
    untuned = store.list_misses(
        session,
        op=op,
        target=target,
        dtype=dtype,
        untuned=versions,
        toolchains=current_toolchain_ids(store.workload_targets(session)),
        limit=limit,
    )
    if manifest is not None:
        if not untuned:
            raise NotFound("no untuned shape (of these filters) was asked of GET /v1/tilings")
        try:
            doc = manifest_of(
                ((m.op, m.target, m.dtype, m.shape, m.count) for m in untuned),
                name="shapes asked without an exact entry",
                **manifest,
            ).to_document()
        except InputError as exc:  # a total below the shapes: tune-set would refuse it
            raise FieldError(("query", "total_budget"), str(exc)) from exc
        return JSONResponse(doc)
    rows = untuned
    if include_tuned:
        rows = store.list_misses(session, op=op, target=target, dtype=dtype, limit=limit)
    open_ = {(m.op, m.target, m.dtype, m.shape) for m in untuned}
    return MissList(
        misses=[
            MissPublic(
                op=m.op,
                target=m.target,
                dtype=m.dtype,
                shape=dict(m.shape),
                count=m.count,
                source="default" if m.source == "default" else "nearest",
                tuned=(m.op, m.target, m.dtype, m.shape) not in open_,
                first_at=m.first_at,
                last_at=m.last_at,
            )
            for m in rows
        ],
        dropped=recorder.dropped,
    )
