"""The runtime tiling table kept in memory by the API, reloaded when the tiling table changes.

``GET /v1/tilings/{op}`` answers from a :class:`tilewise.runtime.TilingTable` (exact → nearest →
default, the runtime library's own rules), so the service and an embedded runtime give the same
answer. Loading the table reads every tuned workload, so it is loaded once and reloaded only when
a cheap fingerprint of ``tw_tilings`` (row count, sum of record ids, latest ``updated_at``)
changes; the fingerprint is read at most every ``check_s`` seconds. Every upsert changes it: a
new row changes the count, a replaced one points at a new (larger) record id.

A reload runs in one thread while the others keep answering from the table in memory.
When the database is away, a table already loaded keeps answering (as an embedded runtime
would); before the first load, lookups fail with StoreError (503).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tilewise.errors import StoreError
from tilewise.store import Store, session_scope, tiling_table_fingerprint

if TYPE_CHECKING:
    from tilewise.runtime import Rule

log = logging.getLogger(__name__)


class Answer(Protocol):
    @property
    def tiling(self) -> Mapping[str, int]: ...
    @property
    def source(self) -> Literal["exact", "nearest", "default"]: ...
    @property
    def workload(self) -> Any: ...
    @property
    def latency_us(self) -> float | None: ...
    @property
    def distance(self) -> float | None: ...
    @property
    def rule(self) -> Rule: ...
    @property
    def predicted_gain(self) -> float | None: ...


class Table(Protocol):
    def lookup(self, op: str, *, target: str, dtype: str, shape: Mapping[str, int]) -> Answer: ...


def load_from_store(store: Store, *, any_toolchain: bool = False) -> Table:
    """``TilingTable.from_db`` through the app's own engine (no new engine per reload): the
    same document, the same validation, the same lookup rules (the entries of this host's
    toolchain; with ``any_toolchain``, another's stand in where a workload has none)."""
    from tilewise.export import table_document
    from tilewise.runtime import TilingTable

    with session_scope(store) as session:
        doc = table_document(session, any_toolchain=any_toolchain)
    # The service counts its misses itself (tilewise.api.misses), across reloads.
    return TilingTable.from_document(doc, source=store.safe_url, max_miss_shapes=0)


def load_any_toolchain(store: Store) -> Table:
    return load_from_store(store, any_toolchain=True)


class LookupCache:
    """Thread-safe holder of the in-memory table; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        check_s: float = 1.0,
        loader: Callable[[Store], Table] = load_from_store,
    ) -> None:
        self.store = store
        self.check_s = check_s
        self._loader = loader
        self._lock = threading.Lock()
        self._table: Table | None = None
        self._fingerprint: tuple[Any, ...] | None = None
        self._checked = float("-inf")
        self.loads = 0

    def _read_fingerprint(self) -> tuple[Any, ...]:
        with session_scope(self.store) as session:
            return tiling_table_fingerprint(session)

    def table(self) -> Table:
        """The current table, reloaded first if the tiling table changed.

        Reloading (fitting the choice models of every op) can take seconds: one thread reloads
        while the others go on answering from the table in memory. Only the first load makes
        callers wait.
        """
        table = self._table
        if table is not None and time.monotonic() - self._checked < self.check_s:
            return table
        if table is not None and not self._lock.acquire(blocking=False):
            return table  # another thread is checking or reloading
        if table is None:
            self._lock.acquire()
        try:
            now = time.monotonic()
            if self._table is not None and now - self._checked < self.check_s:
                return self._table  # loaded by the thread this one waited for
            try:
                fingerprint = self._read_fingerprint()
            except StoreError as exc:
                if self._table is None:
                    raise
                # The database is away: the table in memory is the best answer there is (a
                # runtime keeps running on it too). Try again at the next check.
                log.warning("tiling table not refreshed, serving the one in memory: %s", exc)
                self._checked = now
                return self._table
            if self._table is None or fingerprint != self._fingerprint:
                self._table = self._loader(self.store)
                self._fingerprint = fingerprint
                self.loads += 1
            self._checked = now
            return self._table
        finally:
            self._lock.release()

    def lookup(self, op: str, *, target: str, dtype: str, shape: Mapping[str, int]) -> Answer:
        return self.table().lookup(op, target=target, dtype=dtype, shape=dict(shape))
