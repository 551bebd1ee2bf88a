"""The nearest rule's cell index (tilewise.runtime._cells): the same nearest entry as the
distance to every entry, from a cell's candidates."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tilewise.export import TableEntry
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import get_target
from tilewise.runtime import TilingTable, _cells, _group
from tilewise.runtime._cells import Cells
from tilewise.types import Shape

LAG = get_op("linear_add_gelu")
TWIN = get_target("cpu-twin")
LEAST = (("M", 1), ("N", 1), ("K", 1))


def full_first(logs: list[np.ndarray], positions: list[float]) -> tuple[int, float]:
    distance = np.abs(logs[0] - positions[0])
    for column, position in zip(logs[1:], positions[1:], strict=True):
        distance += np.abs(column - position)
    index = int(distance.argmin())
    return index, float(distance[index])


@pytest.mark.parametrize("powers", [False, True], ids=["any", "powers-of-two"])
def test_a_cell_gives_the_first_nearest_entry_ties_included(powers: bool) -> None:
    # Powers of two lie on whole log positions, where many entries tie: the first must win.
    rng = random.Random(3)

    def value() -> int:
        return 2 ** rng.randint(0, 12) if powers else int(2 ** rng.uniform(0, 12))

    values = [[value() for _ in range(600)] for _ in LEAST]
    logs = [np.array([np.log2(v) for v in column]) for column in values]
    cells = Cells.build(LEAST, values, logs)
    assert cells is not None
    for _ in range(3000):
        asked = {d: value() for d, _ in LEAST}
        positions = [float(np.log2(asked[d])) for d, _ in LEAST]
        assert cells.first(asked, positions) == full_first(logs, positions)
    # Outside the cells: no answer (the caller measures every entry).
    assert cells.first({"M": 1 << 20, "N": 4, "K": 4}, [20.0, 2.0, 2.0]) is None


def test_too_many_cells_make_no_index(monkeypatch: pytest.MonkeyPatch) -> None:
    values = [[1, 1 << 20], [1, 1 << 20], [1, 1 << 20]]
    logs = [np.log2(np.array(c, dtype=np.float64)) for c in values]
    assert Cells.build(LEAST, values, logs) is None  # 23 octaves per dim
    monkeypatch.setattr(_cells, "MAX_KEPT", 1)
    assert Cells.build(LEAST, [[1, 4], [1, 4], [1, 4]], logs) is None


def entries(count: int, rng: random.Random) -> list[TableEntry]:
    found = []
    for i in range(count):
        shape = Shape({d: int(2 ** rng.uniform(0, 12)) + 15 for d in ("M", "N", "K")})
        default = LAG.default_tiling(shape, "float32", TWIN)
        kept = i % 7 == 0  # some tunes kept the default: answered as the asked shape's default
        found.append(
            TableEntry(
                op="linear_add_gelu",
                op_version=LAG.version,
                target="cpu-twin",
                dtype="float32",
                shape=shape,
                tiling=default if kept else default.replace(iterateOrder=1),
                latency_us=100.0,
                default_latency_us=150.0,
                speedup=1.5,
                evaluations=40,
                is_default=kept,
            )
        )
    return found


def test_the_table_answers_as_without_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(4)
    tuned = entries(300, rng)
    indexed = TilingTable(tuned, cache_size=0)
    monkeypatch.setattr(_group, "NEAR_INDEX_ENTRIES", 10**9)
    plain = TilingTable(tuned, cache_size=0)
    assert indexed._groups[("linear_add_gelu", "cpu-twin", "float32")].near is not None
    assert plain._groups[("linear_add_gelu", "cpu-twin", "float32")].near is None
    rules = set()
    for i in range(400):
        top = 14 if i % 10 else 22  # some beyond the tuned sizes, outside the cells
        shape = {d: int(2 ** rng.uniform(0, top)) for d in ("M", "N", "K")}
        ask = {"target": "cpu-twin", "dtype": "float32", "shape": shape}
        answer = indexed.lookup("linear_add_gelu", **ask)
        assert answer == plain.lookup("linear_add_gelu", **ask)
        rules.add(answer.rule)
    assert {"carried", "kept_default"} <= rules
