"""swiglu_grad against torch.autograd: the gradients of F.silu(g) * u, in float64, are what both
the spec's reference and the kernel (built and run on the twin) must give."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tilewise.kernels.backends import MeasureOptions
from tilewise.kernels.backends._cpu_twin import CpuTwinBackend
from tilewise.kernels.ops import get_op
from tilewise.kernels.targets import twin_target
from tilewise.settings import Settings
from tilewise.types import Shape

torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")

SPEC = get_op("swiglu_grad")


def autograd(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """dg, du of F.silu(g) * u for the upstream gradient dout, by torch.autograd in float64."""
    dout, g, u = (torch.from_numpy(inputs[k].astype(np.float64)) for k in ("dout", "g", "u"))
    g.requires_grad_(True)
    u.requires_grad_(True)
    (torch.nn.functional.silu(g) * u).backward(dout)
    assert g.grad is not None and u.grad is not None
    return {"dg": g.grad.numpy(), "du": u.grad.numpy()}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reference_is_autograd(dtype: str) -> None:
    # Wide gate values: the saturated ends of the sigmoid and the zero of silu' near g = -1.28.
    shape = Shape({"T": 8, "I": 512})
    inputs = SPEC.make_inputs(shape, dtype, np.random.default_rng(3))
    inputs["g"] = np.linspace(-30.0, 30.0, shape["T"] * shape["I"]).reshape(8, 512).astype(dtype)
    want, got = autograd(inputs), SPEC.reference(inputs, shape, dtype)
    assert sorted(got) == sorted(want)
    info = np.finfo(dtype)
    # The reference is float64 rounded once to dtype, its products in another order: an ulp.
    for name in want:
        np.testing.assert_allclose(
            got[name].astype(np.float64),
            want[name],
            rtol=float(info.eps),
            atol=float(info.smallest_subnormal),
            err_msg=name,
        )


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CpuTwinBackend]:
    settings = Settings(cache_dir=tmp_path_factory.mktemp("cache"), run_timeout_s=20.0)
    with CpuTwinBackend(settings) as twin:
        yield twin  # type: ignore[misc]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", SPEC.examples)
def test_kernel_gradients_match_autograd(backend: CpuTwinBackend, shape: str, dtype: str) -> None:
    target, parsed = twin_target(), SPEC.validate_shape(Shape.parse(shape))
    tiling = SPEC.default_tiling(parsed, dtype, target)
    build = backend.build(SPEC, SPEC.compile_key(tiling, dtype))
    assert build.ok, build.error
    once = MeasureOptions(warmup=0, repeats=1, max_seconds=1.0)
    run = backend.run(
        build,
        SPEC,
        shape=parsed,
        dtype=dtype,
        target=target,
        tiling=tiling,
        check=True,
        measure=once,
    )
    assert run.ok, run.error
    # The launch's GM buffers: the inputs it was given and the outputs it wrote.
    problem = backend._problem_for(SPEC, parsed, dtype)
    gm = {name: np.fromfile(path, dtype=dtype) for name, path in problem.paths.items()}
    want = autograd(gm)
    rtol, atol = SPEC.tolerance(dtype, parsed)
    for name in ("dg", "du"):
        np.testing.assert_allclose(
            gm[name].astype(np.float64), want[name], rtol=rtol, atol=atol, err_msg=name
        )


def emulate(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The kernel's instructions in numpy as the twin runs them: each computes in float32 from
    dtype operands and rounds its result to dtype (Sigmoid once, as the high-level API)."""
    dtype = inputs["g"].dtype

    def r(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float32).astype(dtype).astype(np.float32)

    dout, g, u = (inputs[k].astype(np.float32) for k in ("dout", "g", "u"))
    s = r(np.float32(1) / (np.float32(1) + np.exp(-g)))
    du = r(g * s)
    t = r(r(g - du) + np.float32(1))
    dg = r(r(s * t) * r(u * dout))
    return {"dg": dg, "du": r(du * dout)}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tolerance_holds_at_the_benchmark_shape(dtype: str) -> None:
    # The twin is too slow for T=2048, I=2752 in a test: the kernel's arithmetic, emulated, must
    # meet the tolerance against the float64 reference there.
    shape = SPEC.validate_shape(Shape.parse(SPEC.benchmark_shapes[-1]))
    inputs = SPEC.make_inputs(shape, dtype, np.random.default_rng(1))
    want, got = SPEC.reference(inputs, shape, dtype), emulate(inputs)
    rtol, atol = SPEC.tolerance(dtype, shape)
    for name in ("dg", "du"):
        w = want[name].astype(np.float32)
        assert np.isfinite(w).all() and 0.1 < float(np.abs(w).mean()) < 10, name
        bad = np.abs(got[name] - w) > atol + rtol * np.abs(w)
        assert not bad.any(), f"{name}: {int(bad.sum())} elements outside ({rtol}, {atol})"
