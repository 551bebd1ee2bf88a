"""The ops' parameters through load_ops on the twin: a dropout's scale, p and seed and a
layer norm's eps reach the kernel per call, each checked against the reference with the same
values, with one tuned tiling and one plan for all of them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tuner.test_launch import assert_matches, inputs_for, other_tiling, table_entry
from tilewise.errors import InputError
from tilewise.kernels.ops import get_op
from tilewise.launch import load_ops
from tilewise.launch._host import Host
from tilewise.runtime import TilingTable
from tilewise.settings import Settings
from tilewise.types import Shape

DROPOUT = get_op("scale_relu_dropout")
LAYERNORM = get_op("layernorm_gelu")


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_each_dropout_call_takes_its_own_scale_p_and_seed(
    dtype: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape = Shape({"N": 70001})
    tiling = other_tiling(DROPOUT, shape, dtype)
    ops = load_ops(TilingTable([table_entry(DROPOUT, shape, dtype, tiling)]), settings=settings)
    (x,) = inputs_for(DROPOUT, shape, dtype, seed=5).values()
    masks = {}
    for given in (
        {},
        {"seed": 1},
        {"seed": 2},
        {"seed": 2**32 - 1, "p": 0.5},
        {"p": 0.0, "scale": -0.5},
        {"p": 0.9, "scale": 3.0, "seed": 2},
    ):
        got = ops.scale_relu_dropout(x, **given)
        assert_matches(DROPOUT, shape, dtype, {"x": x}, got, **given)
        assert ops.last_choice is not None
        assert (ops.last_choice.tiling, ops.last_choice.source) == (tiling, "exact")
        masks[tuple(sorted(given.items()))] = got != 0
    assert len(ops._plans) == 1  # the parameters are no part of the plan's key
    one, two = masks[(("seed", 1),)], masks[(("seed", 2),)]
    assert (one != two).mean() > 0.05  # another seed, another mask
    kept = masks[(("p", 0.9), ("scale", 3.0), ("seed", 2))].mean() / (x > 0).mean()
    assert abs(kept - 0.1) < 0.01

    launched: list[str] = []
    monkeypatch.setattr(Host, "launch", lambda *a, **k: launched.append("x"))
    for bad, message in (
        ({"p": 1.0}, r"p must be in \[0, 1\), got 1.0"),
        ({"seed": -3}, r"seed must be in \[0, 4294967295\], got -3"),
        ({"seed": 1.5}, "seed must be an integer, got 1.5"),
        ({"drop": 0.2}, "unknown keyword drop; attributes: none; parameters: scale, p, seed"),
    ):
        with pytest.raises(InputError, match=message):
            ops.scale_relu_dropout(x, **bad)
    assert launched == []


def test_the_layer_norm_eps_reaches_the_kernel(settings: Settings) -> None:
    shape = Shape({"R": 3, "H": 40})
    ops = load_ops(TilingTable([]), settings=settings)
    inputs = inputs_for(LAYERNORM, shape, "float32", seed=2)
    outputs = {}
    for eps in (1e-5, 0.25, 4.0):
        got = ops.layernorm_gelu(*inputs.values(), eps=eps)
        assert_matches(LAYERNORM, shape, "float32", inputs, got, eps=eps)
        outputs[eps] = got
    assert not np.allclose(outputs[0.25], outputs[4.0])
    with pytest.raises(InputError, match=r"eps must be at least 0, got -1\.0"):
        ops.layernorm_gelu(*inputs.values(), eps=-1.0)
