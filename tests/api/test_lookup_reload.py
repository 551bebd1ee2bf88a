"""The service's table cache: a reload runs in one thread while the others keep answering."""

from __future__ import annotations

import threading
from typing import Any

from tilewise.api.lookup import LookupCache


class _Cache(LookupCache):
    """A LookupCache whose fingerprint is set by the test (no database)."""

    fingerprint: tuple[Any, ...] = (1,)

    def _read_fingerprint(self) -> tuple[Any, ...]:
        return self.fingerprint


def test_lookups_answer_from_the_table_in_memory_while_one_thread_reloads() -> None:
    release = threading.Event()
    loading = threading.Event()
    tables = iter(["first", "second"])

    def loader(_: Any) -> Any:
        table = next(tables)
        if table == "second":
            loading.set()
            assert release.wait(10), "the test did not release the reload"
        return table

    cache = _Cache(store=None, check_s=0.0, loader=loader)  # type: ignore[arg-type]
    assert cache.table() == "first"

    cache.fingerprint = (2,)
    reloaded: list[Any] = []
    reloader = threading.Thread(target=lambda: reloaded.append(cache.table()))
    reloader.start()
    try:
        assert loading.wait(10)
        # The reload is blocked in the loader: another caller is not made to wait for it.
        assert cache.table() == "first"
    finally:
        release.set()
        reloader.join(10)
    assert reloaded == ["second"]
    assert cache.table() == "second"
    assert cache.loads == 2
