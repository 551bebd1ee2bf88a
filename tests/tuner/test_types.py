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
        ("M=64,M=4096,N=64", "M given twice"),
        ('"N=5"', "'\"N' is not a dim name, in '\"N=5\"'"),
        # What int() alone would take, and the service's published pattern does not.
        ("N=4_096", "N must be an integer, got '4_096'"),
        ("M=\u0662\u0665\u0666", "M must be an integer"),
        ("N=4096,", "an empty item between commas"),
        (",N=4096", "an empty item between commas"),
        ("N=1,,M=2", "an empty item between commas"),
        (" ", "no dimensions"),
        ("N=" + "9" * 60, "N has 60 digits: no dim is that large"),
    ],
)
def test_shape_parse_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Shape.parse(text)


def test_tiling_is_hashable_and_order_free() -> None:
    a, b = Tiling({"x": 1, "y": 2}), Tiling({"y": 2, "x": 1})
    assert a == b and hash(a) == hash(b) and a.key() == b.key() == '{"x":1,"y":2}'
    assert a.replace(x=3)["x"] == 3 and a["x"] == 1


def test_a_tiling_is_immutable_and_survives_pickling() -> None:
    import copy
    import pickle

    tiling = Tiling({"y": 2, "x": 1})
    with pytest.raises(AttributeError, match="immutable"):
        tiling.x = 3  # type: ignore[attr-defined]
    for copied in (pickle.loads(pickle.dumps(tiling)), copy.deepcopy(tiling)):
        assert copied == tiling and hash(copied) == hash(tiling)
        assert copied.entries == (("x", 1), ("y", 2)) and list(copied) == ["x", "y"]
    assert tiling == {"x": 1, "y": 2} and tiling != {"x": 1}
    assert repr(tiling) == "Tiling({'x': 1, 'y': 2})"


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


def test_toolchain_id_is_a_stable_short_hash_of_its_parts() -> None:
    from tilewise.types import UNKNOWN_TOOLCHAIN, Toolchain

    a = Toolchain("cpu-twin", "clang 19.1", "twin 0123456789ab", "aaaaaaaaaaaa")
    assert a.id == Toolchain("cpu-twin", "clang 19.1", "twin 0123456789ab", "aaaaaaaaaaaa").id
    assert len(a.id) == 12 and int(a.id, 16) >= 0
    assert a.id != Toolchain("cpu-twin", "clang 19.2", "twin 0123456789ab", "aaaaaaaaaaaa").id
    assert Toolchain.unknown().id == UNKNOWN_TOOLCHAIN and not Toolchain.unknown().known


def test_a_toolchain_names_a_version_once() -> None:
    from tilewise.types import Toolchain

    ascend = Toolchain("ascend", "CANN 8.1.RC1", "CANN 8.1.RC1", "aaaaaaaaaaaa")
    assert str(ascend) == "CANN 8.1.RC1, profile aaaaaaaaaaaa"
    twin = Toolchain("cpu-twin", "clang 19.1", "twin 0123456789ab", "aaaaaaaaaaaa")
    assert str(twin) == "clang 19.1, twin 0123456789ab, profile aaaaaaaaaaaa"


def test_toolchain_stale_reasons_name_what_changed() -> None:
    from tilewise.types import Toolchain

    now = Toolchain("cpu-twin", "clang 19.1", "twin 0123456789ab", "aaaaaaaaaaaa")
    assert now.stale_reason(now) is None
    assert now.stale_reason(None) is None  # nothing to compare with
    older = Toolchain("cpu-twin", "clang 18.1", "twin 0123456789ab", "aaaaaaaaaaaa")
    assert older.stale_reason(now) == "compiled with clang 18.1 (now clang 19.1)"
    headers = Toolchain("cpu-twin", "clang 19.1", "twin ffffffffffff", "aaaaaaaaaaaa")
    assert headers.stale_reason(now) == "twin headers changed"
    profile = Toolchain("cpu-twin", "clang 19.1", "twin 0123456789ab", "bbbbbbbbbbbb")
    assert profile.stale_reason(now) == "target profile changed"
    cann = Toolchain("ascend", "CANN 8.0.RC3", "CANN 8.0.RC3", "aaaaaaaaaaaa")
    cann_now = Toolchain("ascend", "CANN 8.1.RC1", "CANN 8.1.RC1", "aaaaaaaaaaaa")
    assert cann.stale_reason(cann_now) == "compiled with CANN 8.0.RC3 (now CANN 8.1.RC1)"
    assert "not recorded" in (Toolchain.unknown().stale_reason(now) or "")
