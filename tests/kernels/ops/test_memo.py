"""The memo of a pure function of (tiling, shape) kept per the values it reads, and the
matmul core split it speeds up the default heuristics with."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

import pytest

from tilewise.kernels.ops import _matmul_common as cube
from tilewise.kernels.ops import _memo, get_op, list_ops
from tilewise.kernels.ops._memo import ReadMemo
from tilewise.kernels.ops._values import ceil_div
from tilewise.kernels.targets import get_target
from tilewise.types import Shape, Tiling


def test_a_result_is_kept_per_the_values_read_and_branches_are_told_apart() -> None:
    calls: list[int] = []

    def fn(tiling: Mapping[str, int], shape: Mapping[str, int]) -> int:
        calls.append(1)
        if tiling["a"] > 2:  # this branch reads a dim, the other does not
            return tiling["a"] * shape["M"]
        return tiling["a"] + tiling["b"]

    memo = ReadMemo(fn)
    rng = random.Random(0)
    for _ in range(400):
        tiling = Tiling({"a": rng.randint(0, 5), "b": rng.randint(0, 3), "c": rng.randint(0, 9)})
        shape = Shape({"M": rng.randint(1, 4), "N": rng.randint(1, 99)})
        assert memo(tiling, shape) == fn(tiling, shape)
    # Calls that read the same values are answered from the memo: at most one call per
    # distinct (a, b) with a <= 2 and per distinct (a, M) with a > 2, besides the 400 checks.
    assert len(calls) - 400 <= 3 * 4 + 3 * 4


def test_a_function_that_iterates_or_needs_more_than_a_mapping_is_not_kept() -> None:
    seen = []

    def total(tiling: Mapping[str, int], shape: Mapping[str, int]) -> int:
        seen.append(1)
        return sum(tiling.values())

    memo = ReadMemo(total)
    tiling, shape = Tiling({"a": 1, "b": 2}), Shape({"M": 1})
    assert memo(tiling, shape) == memo(tiling, shape) == 3
    assert len(seen) == 2

    def named(tiling: Mapping[str, int], shape: Mapping[str, int]) -> str:
        return shape.key()  # type: ignore[attr-defined]  # a Shape method, no view has it

    memo = ReadMemo(named)
    assert memo(tiling, Shape({"M": 4})) == "M=4"
    assert memo(tiling, Shape({"M": 5})) == "M=5"


def test_an_error_of_the_function_is_raised_and_the_memo_keeps_working() -> None:
    def divide(tiling: Mapping[str, int], shape: Mapping[str, int]) -> int:
        return shape["M"] // tiling["a"]

    memo = ReadMemo(divide)
    with pytest.raises(ZeroDivisionError):
        memo(Tiling({"a": 0}), Shape({"M": 4}))
    assert memo(Tiling({"a": 2}), Shape({"M": 4})) == 2
    assert memo(Tiling({"a": 2}), Shape({"M": 9})) == 4


@pytest.mark.parametrize("spec", list_ops(), ids=lambda s: s.name)
def test_check_valid_and_validator_agree_with_the_footprint_built_again(spec) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(1)
    target = get_target("ascend910b4")
    for shape in spec.example_shapes():
        for dtype in spec.dtypes:
            tunables = spec.tunables(shape, dtype, target)
            for _ in range(60):
                tiling = Tiling({t.name: rng.choice(t.values) for t in tunables})
                check = spec.check(tiling, shape, dtype, target)
                assert check.footprint == spec.footprint(tiling, shape, dtype, target)
                assert spec.valid(tiling, shape, dtype, target) == check.valid
                assert spec.validator(dtype, target)(tiling, shape) == check.valid


def _split_by_every_pair(m: int, n: int, cores: int) -> tuple[int, int]:
    """default_split's rule, pair by pair as it reads."""
    best: tuple[tuple[int, int], int, int] | None = None
    for sm in cube.single_core(m, cores):
        for sn in cube.single_core(n, cores):
            used = ceil_div(m, sm) * ceil_div(n, sn)
            score = (-used, sm * sn + abs(sm - sn))
            if used <= cores and (best is None or score < best[0]):
                best = (score, sm, sn)
    assert best is not None
    return best[1], best[2]


def test_default_split_is_the_best_pair_by_its_rule() -> None:
    rng = random.Random(2)
    sizes = [1, 15, 16, 17, 100, 1000, 4096, 5000] + [rng.randint(1, 1 << 16) for _ in range(60)]
    for m, n in itertools.product(sizes, repeat=2):
        for cores in (1, 2, 8, 20, 24):
            assert cube.default_split(m, n, cores) == _split_by_every_pair(m, n, cores)


def test_the_default_tiling_is_the_same_twice() -> None:
    spec, target = get_op("linear_add_gelu"), get_target("ascend910b1")
    shape = Shape({"M": 300, "N": 700, "K": 900})
    first = spec.default_tiling(shape, "float16", target)
    assert spec.default_tiling(shape, "float16", target) == first
    assert spec.check(first, shape, "float16", target).valid


def test_the_base_block_domains_ascend() -> None:
    # default_base bisects them for the largest value within a cap.
    assert list(cube.BASE_MN) == sorted(cube.BASE_MN)
    assert list(cube.BASE_K) == sorted(cube.BASE_K)


def test_a_splits_pieces_are_the_core_splits_that_fit() -> None:
    rng = random.Random(3)
    extents = list(range(1, 2000)) + [rng.randint(1, 1 << 24) for _ in range(2000)]
    for cores in (1, 2, 3, 7, 20, 24, 32):
        for extent in extents:
            # The definition: each split's per-core extent rounded up to 16, once, ascending.
            splits = [s for s in cube.CORE_SPLITS if s <= cores]
            singles = sorted({-(-ceil_div(extent, s) // 16) * 16 for s in splits})
            expected = tuple(
                (single, ceil_div(extent, single))
                for single in singles
                if ceil_div(extent, single) <= cores
            )
            pieces, first_within = cube._pieces(-(-extent // 16), cores)
            assert pieces == expected
            assert cube.single_core(extent, cores) == tuple(singles)
            # The first piece taking at most c cores, for every c.
            for c in range(cores + 1):
                within = [i for i, (_, used) in enumerate(pieces) if used <= c]
                assert first_within[c] == (within[0] if within else len(pieces))


@pytest.mark.parametrize("name", ["linear_add_gelu", "swiglu_mlp"])
def test_a_default_fit_kept_per_base_block_is_the_fit_of_the_asked_shape(name: str) -> None:
    # default_matmul keeps the epilogue fit per base block, warm_defaults fits every base block
    # ahead; the fit done afresh at each asked shape must give the same tiling, and a valid one.
    spec = get_op(name)
    m, n, k = {"linear_add_gelu": ("M", "N", "K"), "swiglu_mlp": ("T", "I", "H")}[name]
    objects = 2 if name == "swiglu_mlp" else 1
    rng = random.Random(4)
    for target in (get_target("ascend910b4"), get_target("cpu-twin")):
        for dtype in spec.dtypes:
            spec.warm_defaults(dtype, target)
            fits = _memo.kept_of(spec, f"{dtype} default fit", target, dict)
            warmed = dict(fits)
            shapes = [
                Shape(
                    {
                        m: rng.randint(1, 1 << rng.randint(1, 14)),
                        n: 16 * rng.randint(1, 600),
                        k: rng.randint(1, 1 << rng.randint(1, 12)),
                    }
                )
                for _ in range(300)
            ]
            for shape in shapes:
                answer = spec.default_tiling(shape, dtype, target)
                sm, sn = cube.default_split(shape[m], shape[n], target.vector_cores)
                base = cube.default_base(sm, sn, shape[k], dtype, target, objects)
                start = Tiling({**base, "singleCoreM": sm, "singleCoreN": sn})
                fresh = cube.fit_epilogue(
                    start, lambda t, s=shape, d=dtype, g=target: spec.valid(t, s, d, g)
                )
                assert answer == fresh, (dtype, target.name, dict(shape))
                assert spec.check(answer, shape, dtype, target).valid
            # Every base block the shapes started from was fitted ahead.
            assert fits == warmed


@pytest.mark.parametrize("name", ["linear_add_gelu", "swiglu_mlp"])
def test_a_default_kept_per_split_is_the_default_of_every_shape_that_shares_it(name: str) -> None:
    # default_matmul keeps each tiling per (split, K capped at the vendor's baseK): shapes that
    # share them answer the kept tiling, which must be the one computed afresh for each.
    spec = get_op(name)
    m, n, k = {"linear_add_gelu": ("M", "N", "K"), "swiglu_mlp": ("T", "I", "H")}[name]
    rng = random.Random(7)
    for target in (get_target("ascend910b4"), get_target("cpu-twin")):
        for dtype in spec.dtypes:
            # Token counts, as an LLM server asks them, beside a few projections.
            shapes = [
                Shape(
                    {
                        m: tokens,
                        n: rng.choice((1000, 4096)),
                        k: rng.choice((1024, 11008, rng.randint(1, 80))),
                    }
                )
                for tokens in rng.sample(range(1, 4097), 200)
            ]
            _memo._MEMOS.clear()
            answers = [spec.default_tiling(shape, dtype, target) for shape in shapes]
            kept = _memo.kept_of(spec, f"{dtype} defaults", target, dict)
            assert 0 < len(kept) < len(shapes)  # some shapes answered a kept tiling
            for shape, answer in zip(shapes, answers, strict=True):
                _memo._MEMOS.clear()
                assert spec.default_tiling(shape, dtype, target) == answer, dict(shape)


# Python 3.12+ warns of any fork in a process with threads (an earlier test's pool, say).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_finds_a_memo_another_thread_was_keeping_into_free() -> None:
    import os
    import signal

    memo = _memo.kept_of(object(), "fork", object(), lambda: ReadMemo(lambda t, s: t["a"] + s["x"]))
    assert memo({"a": 1}, {"x": 2}) == 3
    memo._lock.acquire()  # another thread keeping a result at the fork
    try:
        pid = os.fork()
        if pid == 0:  # the child: a result not kept yet takes the lock
            try:
                signal.alarm(20)
                os._exit(0 if memo({"a": 5}, {"x": 2}) == 7 else 3)
            finally:
                os._exit(4)
    finally:
        memo._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # -14: SIGALRM, the child waited
