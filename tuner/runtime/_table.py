"""The tiling table: loading, lookups and the count of shapes met (see
:mod:`tilewise.runtime`)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilewise._misses import Miss, collect_misses, misses_manifest
from tilewise.errors import InputError, StoreError
from tilewise.export import (
    Choice,
    Loaded,
    PortfolioGroup,
    TableEntry,
    TableFormatError,
    checked_entry,
    load_entries,
    parse_table,
)
from tilewise.forks import renew_in_child
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime._answer import Answer, Source
from tilewise.runtime._group import Group, chosen, nearest
from tilewise.runtime._portfolio import attach
from tilewise.types import MAX_DIM, Shape

if TYPE_CHECKING:
    import httpx

    from tilewise.manifest import Manifest

_log = logging.getLogger("tilewise.runtime")


class TilingTable:
    """An in-memory tiling table answering :meth:`lookup`; see the module docstring."""

    #: At most this many messages are kept in :attr:`rejected` (the counts stay exact).
    MAX_REJECTED_MESSAGES = 100

    def __init__(
        self,
        entries: Iterable[TableEntry],
        *,
        max_candidates: int = 64,
        cache_size: int = 4096,
        max_miss_shapes: int = 10_000,
        rejected: Iterable[str] = (),
        source: str = "tiling table",
        choices: Iterable[Choice] = (),
        portfolios: Iterable[PortfolioGroup] = (),
    ) -> None:
        """Index ``entries`` (validated :class:`~tilewise.export.TableEntry` values).

        ``rejected`` names entries a loader already left out (:attr:`Loaded.rejected`); they
        are counted as ``"invalid entry"``. ``source`` names the file, URL or database in the
        warning logged when entries are left out as invalid. ``choices`` are the table's choice
        grids (:attr:`Loaded.choices`): a group of entries with one answers shapes nobody tuned
        by it. ``portfolios`` are the groups of the table's portfolio section
        (:attr:`Loaded.portfolio`): an op, target and dtype with one answers every shape by its
        selection rule (rule ``portfolio``), the tuned shapes too.

        Raises:
            TableFormatError: a portfolio that does not fit its op (naming where it is).
        """
        if max_candidates < 1 or cache_size < 0 or max_miss_shapes < 0:
            raise InputError("max_candidates must be >= 1; cache_size, max_miss_shapes >= 0")
        self.max_candidates = max_candidates
        self.cache_size = cache_size
        self.max_miss_shapes = max_miss_shapes
        self._miss_shapes = self._misses_dropped = 0
        self._miss_lock = threading.Lock()
        #: Entries left out at load, by reason: "unknown op or target", "other op version"
        #: (both expected in a table shared by several versions of tilewise) and "invalid entry".
        self.skipped: dict[str, int] = {}
        #: What was wrong with each entry left out as invalid, naming it (the first
        #: :attr:`MAX_REJECTED_MESSAGES`).
        self.rejected: list[str] = []
        self._lock = threading.Lock()
        renew_in_child(self, "_lock", "_miss_lock")
        self._groups: dict[tuple[str, str, str], Group] = {}
        for message in rejected:
            self._skip("invalid entry", message)
        buckets: dict[tuple[str, str, str], list[TableEntry]] = {}
        for entry in entries:
            try:
                reason = self._foreign(entry)
            except InputError as exc:
                self._skip("invalid entry", str(exc))
                continue
            if reason:
                self._skip(reason)
            else:
                buckets.setdefault((entry.op, entry.target, entry.dtype), []).append(entry)
        grids = {
            (c.op, c.target, c.dtype): c
            for c in choices
            if c.op in {k[0] for k in buckets} and c.op_version == get_op(c.op).version
        }
        for (op, target, dtype), group in buckets.items():
            self._groups[(op, target, dtype)] = Group(
                get_op(op), get_target(target), dtype, group, grids.get((op, target, dtype))
            )
        attach(self._groups, portfolios, source)
        self._size = sum(len(g.entries) for g in self._groups.values())
        if self.rejected:
            more = self.skipped["invalid entry"] - 1
            _log.warning(
                "%s: %d invalid entries left out; the first: %s%s",
                source,
                self.skipped["invalid entry"],
                self.rejected[0],
                f" (and {more} more, see TilingTable.rejected)" if more else "",
            )

    def _skip(self, reason: str, message: str | None = None) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if message is not None and len(self.rejected) < self.MAX_REJECTED_MESSAGES:
            self.rejected.append(message)

    @staticmethod
    def _foreign(entry: TableEntry) -> str | None:
        """Why ``entry`` is not for this code (None when it is).

        Raises:
            InputError: the entry claims an op this code knows, but is not one of its workloads.
        """
        try:
            spec = get_op(entry.op)
            profile = get_target(entry.target)
        except InputError:
            return "unknown op or target"
        if entry.op_version != spec.version:
            return "other op version"
        named = f"{entry.op} {entry.target} {entry.dtype} {dict(entry.shape)}"
        if profile.name != entry.target:
            # A table names targets as exports write them (as the C header requires too).
            raise InputError(
                f"{named}: target {entry.target!r} is not a canonical target name "
                f"(write {profile.name!r})"
            )
        if entry.dtype not in spec.dtypes or set(entry.shape) != set(spec.dims):
            raise InputError(
                f"{named}: not a dtype and shape of {entry.op} (dims {', '.join(spec.dims)})"
            )
        try:
            spec.validate_shape(entry.shape)
        except InputError as exc:
            raise InputError(f"{named}: {exc}") from None
        checked_entry(entry, spec, profile)
        return None

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def from_document(
        cls, doc: object, *, source: str = "tiling table", **options: int
    ) -> TilingTable:
        """From a decoded JSON document (validated; see :mod:`tilewise.export`).

        Raises:
            TableFormatError: the document as a whole is not a valid table.
        """
        return cls._loaded(load_entries(doc, source=source), source, options)

    @classmethod
    def _loaded(cls, loaded: Loaded, source: str, options: Mapping[str, int]) -> TilingTable:
        return cls(
            loaded.entries,
            rejected=loaded.rejected,
            source=source,
            choices=loaded.choices,
            portfolios=loaded.portfolio,
            **options,
        )

    @classmethod
    def from_file(cls, path: str | Path, **options: int) -> TilingTable:
        """From a file written by ``tilewise export --format json``.

        Raises:
            TableFormatError: not a valid document (truncated, other format version ...).
            InputError: the file cannot be read.
        """
        if not isinstance(path, str | os.PathLike):
            raise InputError(f"a tiling table file is named by a path, got {type(path).__name__}")
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read tiling table {path}: {exc.strerror or exc}") from exc
        if data.startswith(b"SQLite format 3\0"):
            raise TableFormatError(
                f"{path}: a SQLite database, not a JSON tiling table: did you mean "
                f"sqlite:///{Path(path).resolve()}?"
            )
        return cls._loaded(parse_table(data, source=str(path)), str(path), options)

    @classmethod
    def from_url(
        cls,
        base_url: str,
        *,
        op: str | None = None,
        target: str | None = None,
        dtype: str | None = None,
        portfolio: int | None = None,
        within: float | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        **options: int,
    ) -> TilingTable:
        """From the REST API: ``GET {base_url}/v1/tables/{op}`` (or ``/v1/tables`` for every
        op) with ``format=json`` and the ``target`` and ``dtype`` filters given; with
        ``portfolio`` (and ``within``, a percent) the service's portfolio table of at most that
        many tilings per op, target and dtype, answered by its selection rule.

        Raises:
            StoreError: the API cannot be reached or answers with an error status.
            TableFormatError: the answer is not a valid document.
        """
        import httpx

        path = "/v1/tables" if op is None else f"/v1/tables/{op}"
        params = {"format": "json"}
        given = (("target", target), ("dtype", dtype), ("portfolio", portfolio), ("within", within))
        params.update({k: str(v) for k, v in given if v is not None})
        url = base_url.rstrip("/") + path
        try:
            with httpx.Client(timeout=timeout, headers=headers, transport=transport) as client:
                response = client.get(url, params=params)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is no HTTPError
            raise StoreError(f"cannot fetch the tiling table from {url}: {exc}") from exc
        if response.status_code != 200:
            raise StoreError(
                f"cannot fetch the tiling table from {url}: HTTP {response.status_code} "
                f"{_detail(response)}"
            )
        return cls._loaded(parse_table(response.content, source=url), url, options)

    @classmethod
    def from_db(
        cls,
        url: str,
        *,
        op: str | None = None,
        target: str | None = None,
        dtype: str | None = None,
        any_toolchain: bool = False,
        **options: int,
    ) -> TilingTable:
        """From the database at ``url`` (never created or migrated here): the tilings measured
        with this host's toolchain of their target, or with ``any_toolchain`` also those of
        others where the workload has none of this one (:func:`tilewise.export.table_document`).

        Raises:
            StoreError, SchemaError: the database cannot be used.
        """
        from tilewise.export import table_document
        from tilewise.store import open_store

        store = open_store(url, create=False)
        try:
            with store.session() as session:
                doc = table_document(
                    session, op=op, target=target, dtype=dtype, any_toolchain=any_toolchain
                )
        finally:
            store.close()
        return cls.from_document(doc, source=store.safe_url, **options)

    # -- asking ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Entries in use (those of :attr:`skipped` not counted)."""
        return self._size

    def groups(self) -> list[tuple[str, str, str, int]]:
        """(op, target, dtype, entries) of each tuned combination."""
        with self._lock:  # lookups may add spellings of names meanwhile
            items = list(self._groups.items())
        seen = {id(g): (k, g) for k, g in items if g.entries}
        return sorted((op, t, d, len(g.entries)) for (op, t, d), g in seen.values())

    def portfolios(self) -> list[tuple[str, str, str, int, int]]:
        """(op, target, dtype, members, tuned shapes) of each combination the table's portfolio
        answers (rule ``portfolio``); empty for a table without a portfolio section."""
        with self._lock:
            items = list(self._groups.items())
        seen = {id(g): (k, g.portfolio) for k, g in items if g.portfolio is not None}
        return sorted((op, t, d, len(p.members), len(p.shapes)) for (op, t, d), p in seen.values())

    def lookup(self, op: str, *, target: str, dtype: str, shape: Mapping[str, int]) -> Answer:
        """The tiling for ``shape``: exact, else nearest valid, else default; by the portfolio's
        selection rule where the table has one for the op, target and dtype.

        A shape answered before (tuned, or computed and kept) is found by a dict lookup on its
        values, without checking their types again: ``1024.0`` finds what ``1024`` did.

        Raises:
            InputError: unknown op, target or dtype, or a shape the op does not take.
        """
        # The fast path: any surprise in the arguments (an unhashable name, a shape that is not
        # a mapping) falls through to _resolve, which names the problem.
        plain = False
        try:
            group = self._groups.get((op, target, dtype))
            if group is not None and len(shape) == group.ndims:
                key = group.key(shape)
                answer = group.exact.get(key)
                if answer is not None:
                    return answer
                answer = group.cache.get(key)
                if answer is not None:
                    seen = group.misses.get(key)
                    if seen is None:
                        self._count(group, key, answer.source)
                    else:
                        seen[0] += 1  # no lock: see _count
                    return answer
                if group.fast and type(shape) is dict:
                    # A plain dict of plain ints within the dims' bounds, as launchers pass:
                    # checked here in a few comparisons, the Shape built without
                    # validate_shape's walk (the same key found, the same dims).
                    for dim, least in group.least:
                        v = shape[dim]
                        if type(v) is not int or not least <= v <= MAX_DIM:
                            break
                    else:
                        plain = True
        except (KeyError, TypeError):
            pass
        if plain:
            return self._first(group, key, Shape.of_ints(shape), shape)  # type: ignore[arg-type]
        return self._resolve(op, target, dtype, shape)

    def _resolve(self, op: str, target: str, dtype: str, shape: Mapping[str, int]) -> Answer:
        spec = get_op(op)
        if not isinstance(dtype, str):
            raise InputError(f"{op}: a dtype is named by a string, got {type(dtype).__name__}")
        spec.validate_dtype(dtype)
        profile = get_target(target)
        asked = spec.validate_shape(shape)
        group = self._groups.get((op, profile.name, dtype))
        if group is None:
            group = Group(spec, profile, dtype, [])
        with self._lock:
            # Later calls with this spelling of the names take the fast path.
            group = self._groups.setdefault((op, profile.name, dtype), group)
            self._groups.setdefault((op, target, dtype), group)
        key = group.key(asked)
        answer = group.exact.get(key)
        if answer is not None:
            return answer
        answer = group.cache.get(key)
        if answer is not None:
            self._count(group, key, answer.source)
            return answer
        return self._first(group, key, asked, asked)

    def _first(self, group: Group, key: Any, asked: Shape, values: Mapping[str, int]) -> Answer:
        """The answer for a shape asked the first time (``values``: the same dims as
        ``asked``, read faster where the caller has a plain dict), counted and kept."""
        answer = None
        if group.portfolio is not None:
            answer = group.portfolio.answer(group, asked)
        elif group.entries:
            if group.grid is not None:
                answer = chosen(group, asked, values, self.max_candidates)
            else:
                answer = nearest(group, asked, self.max_candidates)
        answer = answer or Answer(
            group.spec.default_tiling(asked, group.dtype, group.profile),
            "default",
            None,
            None,
            rule="default",
        )
        self._count(group, key, answer.source)
        if self.cache_size:
            with self._lock:
                cache = group.cache
                while len(cache) >= self.cache_size:
                    del cache[next(iter(cache))]  # oldest computation first
                cache[key] = answer
        return answer

    def _count(self, group: Group, key: Any, source: Source) -> None:
        # A shape counted before is counted again without the lock (lookup's cached path): on
        # CPython with its GIL no thread switch falls inside `seen[0] += 1` (no call, no
        # backward jump), so no count is lost; a lock there took the cached answer from 0.6 to
        # 1.1 us. A free-threaded build may lose counts under contention.
        with self._miss_lock:
            seen = group.misses.get(key)
            if seen is not None:
                seen[0] += 1
            elif self._miss_shapes < self.max_miss_shapes:
                group.misses[key] = [1, source]
                self._miss_shapes += 1
            else:
                self._misses_dropped += 1

    @property
    def misses_dropped(self) -> int:
        """Asks of shapes left out of :meth:`misses` (past ``max_miss_shapes``)."""
        return self._misses_dropped

    def misses(
        self,
        *,
        op: str | None = None,
        target: str | None = None,
        dtype: str | None = None,
        clear: bool = False,
    ) -> list[Miss]:
        """The shapes answered without an exact entry, most asked first (of ``op``, ``target``
        and ``dtype`` when given); ``clear`` starts their counts again."""
        with self._lock:
            groups = list({id(g): g for g in self._groups.values()}.values())
        with self._miss_lock:
            found, removed = collect_misses(groups, op=op, target=target, dtype=dtype, clear=clear)
            self._miss_shapes -= removed
            if clear and op is target is dtype is None:
                self._misses_dropped = 0
        return found

    def misses_manifest(self, *, min_count: int = 1, **options: Any) -> Manifest:
        """The shapes of :meth:`misses` asked ``min_count`` times or more as a tuning manifest,
        weights = counts (``.dumps()`` is its YAML, ``.write(path)`` a file). ``options``:
        ``op``, ``target``, ``dtype`` as for :meth:`misses`; ``name``, ``budget``,
        ``total_budget`` of the manifest.

        Raises:
            InputError: no such shape (a manifest needs one).
        """
        return misses_manifest(self.misses, min_count=min_count, **options)


def _detail(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return str(response.text[:200])
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:200]
    return str(body)[:200]
