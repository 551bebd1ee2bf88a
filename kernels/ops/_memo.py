"""A memo of a pure function of (tiling, shape), keyed on the values it reads.

:meth:`OpSpec.valid` asks whether a tiling's buffers fit the target's memories. The buffers
depend on a few tiling fields (the base block, the depths, the epilogue rows) and often on no
dim at all, so tilings carried to shapes nobody asked before repeat them: the runtime's first
answer for a shape checks one, the default heuristics several. Built in pure Python, the buffer
list costs several microseconds; this memo answers a repeat with one dict lookup.

The first call runs the function on mappings that record every key read (in order). A later
call whose tiling and shape hold the same values at those keys takes the same path through the
same deterministic code, so it has the same result: the memo keeps, per recorded set of keys
(a *plan*), the results by their values. A function that iterates a mapping, asks for a key
it lacks, or uses it as anything but a mapping (an attribute, a hash) is run plainly, its
result not kept.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from operator import itemgetter
from typing import Any, TypeVar

from tilewise.forks import renew_in_child
from tilewise.types import Shape, Tiling

__all__ = ["ReadMemo", "kept_of", "memo_of"]

T = TypeVar("T")

#: Plans per memo, results per plan: past these, results are computed, not kept (or the plan's
#: results start again), so that a stream of unrelated tilings cannot grow the memo unbounded.
MAX_PLANS = 16
MAX_RESULTS = 1 << 16


class _Reading(Mapping[str, int]):
    """A read-only view of a mapping that records the keys read (``whole``: it was iterated,
    measured or asked for a key it lacks, so no subset of keys decides the result)."""

    __slots__ = ("_of", "read", "whole")

    def __init__(self, of: Mapping[str, int]) -> None:
        self._of = of
        self.read: dict[str, int] = {}
        self.whole = False

    def __getitem__(self, key: str) -> int:
        try:
            value = self._of[key]
        except KeyError:
            self.whole = True
            raise
        self.read[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._of)

    def __len__(self) -> int:
        self.whole = True
        return len(self._of)


def _getter(keys: tuple[str, ...]) -> Callable[[Mapping[str, int]], Any]:
    if not keys:
        return lambda _: ()
    return itemgetter(*keys)


def _plain(values: Mapping[str, int]) -> Mapping[str, int]:
    """The dict behind a Tiling or Shape (read in C by itemgetter), else the mapping itself."""
    if type(values) is Tiling or type(values) is Shape:
        return values._index  # type: ignore[union-attr]
    return values


class ReadMemo:
    """The results of ``fn(tiling, shape)``, a pure function of the values it reads."""

    __slots__ = ("__weakref__", "_fn", "_lock", "_plain_only", "_plans")

    def __init__(self, fn: Callable[[Mapping[str, int], Mapping[str, int]], Any]) -> None:
        self._fn = fn
        # (tiling keys, shape keys, their getters, results by values), in the order found.
        self._plans: list[tuple[tuple[str, ...], tuple[str, ...], Any, Any, dict[Any, Any]]] = []
        self._lock = threading.Lock()
        renew_in_child(self, "_lock")
        self._plain_only = False

    def __call__(self, tiling: Mapping[str, int], shape: Mapping[str, int]) -> Any:
        t, s = _plain(tiling), _plain(shape)
        for _, _, tiling_values, shape_values, results in self._plans:
            found = results.get((tiling_values(t), shape_values(s)), results)
            if found is not results:
                return found
        if self._plain_only:
            return self._fn(tiling, shape)
        seen_t, seen_s = _Reading(t), _Reading(s)
        try:
            result = self._fn(seen_t, seen_s)
        except Exception:
            # Raised where the function raises (nothing kept), or it needs more than mappings:
            # then it runs as it is from now on.
            result = self._fn(tiling, shape)
            self._plain_only = True
            return result
        if not (seen_t.whole or seen_s.whole):
            self._keep(tuple(seen_t.read), tuple(seen_s.read), t, s, result)
        return result

    def _keep(
        self,
        tiling_keys: tuple[str, ...],
        shape_keys: tuple[str, ...],
        t: Mapping[str, int],
        s: Mapping[str, int],
        result: Any,
    ) -> None:
        with self._lock:
            plan = next((p for p in self._plans if p[:2] == (tiling_keys, shape_keys)), None)
            if plan is None:
                if len(self._plans) >= MAX_PLANS:
                    return
                plan = (tiling_keys, shape_keys, _getter(tiling_keys), _getter(shape_keys), {})
                self._plans.append(plan)
            _, _, tiling_values, shape_values, results = plan
            if len(results) >= MAX_RESULTS:
                results.clear()
            results[(tiling_values(t), shape_values(s))] = result


# By the ids of (owner, name, target), each with the objects it names: holding them keeps their
# ids from being reused (a profile read from another ini is another target).
_MEMOS: dict[tuple[int, str, int], tuple[object, object, Any]] = {}
_MEMOS_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_MEMOS_LOCK")


def kept_of(owner: object, name: str, target: object, make: Callable[[], T]) -> T:
    """What ``make`` made for ``owner`` (a spec), ``name`` and ``target`` the first time it was
    asked for them (made now when it was not, or when the registry was full and started
    again). ``name`` tells apart what one spec keeps for one target: a dtype, or a dtype and
    what is kept."""
    key = (id(owner), name, id(target))
    found = _MEMOS.get(key)
    if found is not None and found[0] is owner and found[1] is target:
        return found[2]  # type: ignore[no-any-return]
    with _MEMOS_LOCK:
        if len(_MEMOS) >= 256:
            _MEMOS.clear()
        made = make()
        _MEMOS[key] = (owner, target, made)
    return made


def memo_of(
    owner: object,
    name: str,
    target: object,
    fn: Callable[[Mapping[str, int], Mapping[str, int]], Any],
) -> ReadMemo:
    """The memo of ``fn`` for ``owner`` (a spec), ``name`` (a dtype) and ``target``; ``fn`` is
    used when there is none yet."""
    return kept_of(owner, name, target, lambda: ReadMemo(fn))
