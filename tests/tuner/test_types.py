from __future__ import annotations

import pytest

from tilewise.errors import InputError
from tilewise.types import Shape, Tiling, Workload


def test_shape_parse_round_trip() -> None:
    shape = Shape.parse("M=1024, N=17,K=3")
    assert dict(shape) == {"M": 1024, "N": 17, "K": 3}
    assert shape.key() == "K=3,M=1024,N=17"
    assert Shape.parse(shape.key()) == shape


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no dimensions"),
        ("M", "expected NAME=VALUE"),
        ("M=abc", "M must be an integer"),
        ("=3", "NAME=VALUE"),
    ],
)
def test_shape_parse_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Shape.parse(text)


def test_tiling_is_hashable_and_order_free() -> None:
    a, b = Tiling({"x": 1, "y": 2}), Tiling({"y": 2, "x": 1})
    assert a == b and hash(a) == hash(b) and a.key() == b.key() == '{"x":1,"y":2}'
    assert a.replace(x=3)["x"] == 3 and a["x"] == 1


def test_workload_key_depends_on_every_part() -> None:
    base = Workload("op", "v1", "cpu-twin", "float32", Shape({"N": 4}))
    variants = [
        Workload("op2", "v1", "cpu-twin", "float32", Shape({"N": 4})),
        Workload("op", "v2", "cpu-twin", "float32", Shape({"N": 4})),
        Workload("op", "v1", "ascend910b1", "float32", Shape({"N": 4})),
        Workload("op", "v1", "cpu-twin", "float16", Shape({"N": 4})),
        Workload("op", "v1", "cpu-twin", "float32", Shape({"N": 5})),
    ]
    assert len({base.key, *(v.key for v in variants)}) == 6
    assert base == Workload("op", "v1", "cpu-twin", "float32", Shape({"N": 4}))


def test_a_tiling_of_ints_is_the_tiling_of_the_same_values() -> None:
    values = {"tileLength": 2048, "blockDim": 8, "bufferNum": 2}
    fast = Tiling.of_ints(dict(values))
    assert fast == Tiling(values) and hash(fast) == hash(Tiling(values))
    assert fast.key() == Tiling(values).key() and fast["blockDim"] == 8
    assert list(fast) == list(Tiling(values)) and fast.replace(blockDim=4)["blockDim"] == 4
