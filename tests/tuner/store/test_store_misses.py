"""tw_misses: counts added in batches, a bounded table, untuned shapes only when asked."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.api._support import seed_tuned
from tilewise.errors import InputError
from tilewise.kernels.ops import get_op
from tilewise.store import MissRow, Store, list_misses, record_misses, session_scope
from tilewise.types import Shape

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SRD = get_op("scale_relu_dropout")


def miss(n: int, count: int, *, source: str = "nearest", at: datetime = T0, **key: str) -> MissRow:
    where = {"op": "scale_relu_dropout", "target": "cpu-twin", "dtype": "float32", **key}
    return MissRow(shape=Shape({"N": n}), count=count, source=source, first_at=at, last_at=at,
                   **where)  # fmt: skip


def counts(store: Store, **filters: object) -> dict[int, int]:
    with session_scope(store) as s:
        return {m.shape["N"]: m.count for m in list_misses(s, **filters)}  # type: ignore[arg-type]


def test_counts_add_up_across_batches_and_the_latest_source_and_time_win(store: Store) -> None:
    with session_scope(store) as s:
        assert (
            record_misses(s, misses=[miss(64, 3), miss(128, 1, source="default")], max_rows=10) == 0
        )
    later = T0 + timedelta(minutes=5)
    with session_scope(store) as s:
        record_misses(s, misses=[miss(64, 4, source="default", at=later)], max_rows=10)
    with session_scope(store) as s:
        rows = list_misses(s)
    assert [(r.shape["N"], r.count, r.source) for r in rows] == [
        (64, 7, "default"),
        (128, 1, "default"),
    ]
    assert (rows[0].first_at, rows[0].last_at) == (T0, later)
    assert rows[0].shape == Shape({"N": 64}) and rows[0].op == "scale_relu_dropout"


def test_filters_and_limit(store: Store) -> None:
    with session_scope(store) as s:
        record_misses(
            s,
            misses=[miss(64, 5), miss(64, 2, dtype="float16"), miss(32, 9, target="ascend910b1"),
                    miss(16, 1)],
            max_rows=10,
        )  # fmt: skip
    assert counts(store, dtype="float16") == {64: 2}
    assert counts(store, target="ascend910b1") == {32: 9}
    assert counts(store, op="linear_add_gelu") == {}
    with session_scope(store) as s:
        assert [(r.target, r.count) for r in list_misses(s, limit=2)] == [
            ("ascend910b1", 9),
            ("cpu-twin", 5),
        ]


def test_untuned_leaves_out_shapes_tuned_at_the_current_version(store: Store) -> None:
    with session_scope(store) as s:
        record_misses(s, misses=[miss(65536, 8), miss(4096, 3)], max_rows=10)
    seed_tuned(store, shape={"N": 65536})
    assert counts(store) == {65536: 8, 4096: 3}
    assert counts(store, untuned={SRD.name: SRD.version}) == {4096: 3}
    # Tuned at another version of the op: still to tune at this one.
    assert counts(store, untuned={SRD.name: "another-version"}) == {65536: 8, 4096: 3}
    assert counts(store, untuned={}) == {65536: 8, 4096: 3}


def test_the_table_is_bounded_new_shapes_dropped_known_ones_still_counted(store: Store) -> None:
    with session_scope(store) as s:
        dropped = record_misses(s, misses=[miss(1, 1), miss(2, 5), miss(3, 2)], max_rows=2)
    assert dropped == 1 and counts(store) == {2: 5, 3: 2}  # the most asked kept
    with session_scope(store) as s:
        dropped = record_misses(s, misses=[miss(2, 1), miss(4, 7)], max_rows=2)
    assert dropped == 7 and counts(store) == {2: 6, 3: 2}


def test_bad_batches_are_refused(store: Store) -> None:
    with session_scope(store) as s:
        with pytest.raises(InputError):
            record_misses(s, misses=[miss(1, 0)], max_rows=5)
        with pytest.raises(InputError):
            record_misses(s, misses=[miss(1, 1), miss(1, 2)], max_rows=5)
        with pytest.raises(InputError):
            record_misses(s, misses=[], max_rows=-1)


def test_two_writers_recording_the_same_new_shapes_at_once_lose_nothing(store: Store) -> None:
    """Two API processes flushing at the same moment (threads here, separate sessions)."""
    rounds = 20
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        # The two insert the new shapes most asked first: in opposite orders.
        try:
            for i in range(rounds):
                with session_scope(store) as s:
                    batch = [miss(64, n), miss(1000 + i, n), miss(2000 + i, 4 - n)]
                    record_misses(s, misses=batch, max_rows=1000)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in (1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    got = counts(store)
    assert got.pop(64) == (1 + 3) * rounds
    assert got == {base + i: 4 for i in range(rounds) for base in (1000, 2000)}


def test_a_shape_tuned_only_with_another_toolchain_is_still_untuned(store: Store) -> None:
    from tests_support import host_toolchain

    from tilewise.types import Toolchain

    now = host_toolchain()
    old = Toolchain(now.backend, "clang 18.1", now.headers, now.profile)
    seed_tuned(store, shape={"N": 64}, toolchain=old)
    seed_tuned(store, shape={"N": 128})  # this host's toolchain
    with session_scope(store) as s:
        record_misses(s, misses=[miss(64, 3), miss(128, 2)], max_rows=10)
    versions = {SRD.name: SRD.version}
    # Lookups do not serve the stale one: still to tune, when the toolchains are given.
    assert counts(store, untuned=versions, toolchains={"cpu-twin": now.id}) == {64: 3}
    assert counts(store, untuned=versions) == {}
    # A target whose toolchain is not known here: any stored tiling counts.
    assert counts(store, untuned=versions, toolchains={"cpu-twin": None}) == {}
