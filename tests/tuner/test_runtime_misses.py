"""TilingTable.misses: the shapes a table answered without an exact entry, how often, and the
tuning manifest they make."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tilewise.errors import InputError
from tilewise.export import TableEntry
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.launch import Ops
from tilewise.manifest import load_manifest
from tilewise.runtime import Miss, TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape

LAG = get_op("linear_add_gelu")
TWIN = get_target("cpu-twin")
TUNED = Shape({"M": 64, "N": 512, "K": 256})


def lag(m: int, n: int = 512, k: int = 256) -> dict[str, int]:
    return {"M": m, "N": n, "K": k}


@pytest.fixture
def table() -> TilingTable:
    # A tuned tiling that is not the shape's default: a tuned default carries over as the
    # asked shape's default (source default), and these tests want nearest answers too.
    default = LAG.default_tiling(TUNED, "float32", TWIN)
    tiling = default.replace(iterateOrder=1 - default["iterateOrder"])
    assert LAG.valid(tiling, TUNED, "float32", TWIN)
    entry = TableEntry(
        LAG.name, LAG.version, "cpu-twin", "float32", TUNED, tiling, 9.0, 9.0, 1.0, 1
    )
    return TilingTable([entry])


def ask(table: TilingTable, shape: dict[str, int], *, times: int = 1, **where: str) -> str:
    options = {"target": "cpu-twin", "dtype": "float32", **where}
    for _ in range(times):
        answer = table.lookup("linear_add_gelu", shape=shape, **options)  # type: ignore[arg-type]
    return answer.source


def test_exact_answers_are_not_counted_the_others_are_with_how_often(table: TilingTable) -> None:
    big = lag(1, 8192, 8192)
    assert ask(table, dict(TUNED), times=5) == "exact"
    assert ask(table, lag(48), times=3) == "nearest"  # the first computed, then cached
    big_source = ask(table, big, times=2)
    assert ask(table, lag(48), dtype="float16") == "default"  # no float16 entries at all
    assert table.misses() == [
        Miss("linear_add_gelu", "cpu-twin", "float32", Shape(lag(48)), 3, "nearest"),
        Miss("linear_add_gelu", "cpu-twin", "float32", Shape(big), 2, big_source),
        Miss("linear_add_gelu", "cpu-twin", "float16", Shape(lag(48)), 1, "default"),
    ]
    assert table.misses(dtype="float16") == [
        Miss("linear_add_gelu", "cpu-twin", "float16", Shape(lag(48)), 1, "default")
    ]
    assert table.misses(op="scale_relu_dropout") == []
    assert table.misses_dropped == 0


def test_spellings_of_one_shape_and_target_count_as_one(table: TilingTable) -> None:
    ask(table, lag(48))
    ask(table, {"M": 48.0, "N": 512, "K": 256})  # type: ignore[dict-item]
    ask(table, lag(48), target="Ascend910B1")  # a spelling of the ascend910b1 profile
    ask(table, lag(48), target="ascend910b1")
    found = {(m.target, m.count) for m in table.misses()}
    assert found == {("cpu-twin", 2), ("ascend910b1", 2)}
    assert all(isinstance(v, int) for m in table.misses() for v in m.shape.values())


def test_every_ask_counts_without_a_cache_and_clear_starts_again() -> None:
    table = TilingTable([], cache_size=0)
    ask(table, lag(3), times=4)
    assert [m.count for m in table.misses()] == [4]
    assert [m.count for m in table.misses(clear=True)] == [4]
    assert table.misses() == []
    ask(table, lag(3))
    assert [m.count for m in table.misses()] == [1]


def test_bad_shapes_are_not_counted(table: TilingTable) -> None:
    with pytest.raises(InputError):
        ask(table, {"M": 4, "N": 4})
    assert table.misses() == []


def test_at_most_max_miss_shapes_are_kept_the_rest_counted_as_dropped() -> None:
    table = TilingTable([], max_miss_shapes=2)
    for m in (1, 2, 3, 1, 4):
        ask(table, lag(m))
    assert {dict(m.shape)["M"]: m.count for m in table.misses()} == {1: 2, 2: 1}
    assert table.misses_dropped == 2
    with pytest.raises(InputError, match="max_miss_shapes"):
        TilingTable([], max_miss_shapes=-1)


def test_concurrent_asks_are_all_counted(table: TilingTable) -> None:
    """Repeated asks are counted without a lock (see TilingTable._count): with threads
    switching every microsecond, none is lost."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads, calls = 8, 20_000

    def work() -> None:
        for i in range(calls):
            ask(table, lag(1 + i % 4))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(before)
    assert sorted(m.count for m in table.misses()) == [threads * calls // 4] * 4


def test_misses_make_a_manifest_weighted_by_count(table: TilingTable, tmp_path: Path) -> None:
    ask(table, lag(48), times=30)
    ask(table, lag(7), times=2)
    ask(table, lag(5))
    manifest = table.misses_manifest(name="seen in production", total_budget=40, min_count=2)
    doc = manifest.to_document()
    assert doc["workloads"] == [
        {"op": "linear_add_gelu",
         "shapes": [{"M": 48, "N": 512, "K": 256, "weight": 30},
                    {"M": 7, "N": 512, "K": 256, "weight": 2}]},
    ]  # fmt: skip
    assert (doc["name"], doc["target"], doc["dtype"]) == (
        "seen in production",
        "cpu-twin",
        "float32",
    )
    for name in ("misses.yaml", "misses.json"):
        manifest.write(tmp_path / name)
        again = load_manifest(tmp_path / name)
        assert again.to_document() == doc
        assert [(e.workload.shape, e.weight) for e in again.entries()] == [
            (Shape(lag(48)), 30.0),
            (Shape(lag(7)), 2.0),
        ]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(InputError, match="no shapes"):
        table.misses_manifest(min_count=31)
    with pytest.raises(InputError, match=r"^budget: Input should be greater than or equal to 1"):
        table.misses_manifest(budget=0)


def test_load_ops_counts_every_call_of_a_shape_it_has_no_entry_for(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    spec = get_op("scale_relu_dropout")
    ops = Ops(TilingTable([]), settings=Settings(cache_dir=tmp_path_factory.mktemp("cache")))
    x = np.ones(4096, dtype=np.float32)
    for _ in range(3):
        ops.scale_relu_dropout(x)
    assert ops.last_choice is not None and ops.last_choice.source == "default"
    assert [(m.op, dict(m.shape), m.count) for m in ops.table.misses()] == [
        (spec.name, {"N": 4096}, 3)
    ]
