"""``tilewise bench kernels``: the twin's kernels against numpy, PyTorch and the roofline.

For every (op, shape) of issue 6, fp32, in one run on this machine:

* ``default_ms`` / ``tuned_ms`` — the kernel on the CPU twin with the op's default tiling and with
  the best tiling of a tune run of ``budget`` evaluations (a throw-away SQLite database; budget 0
  skips tuning, tuned = default). Checked against the reference at its first launch.
* ``numpy_ms`` — unfused numpy, one call per original operator (several ufuncs where the
  operator has no single numpy call: GELU, SiLU, LayerNorm), preallocated and in place.
  ``numpy_2t_ms`` — the same for the elementwise chains, split in two halves over two threads.
* ``torch_eager_ms`` / ``torch_compile_ms`` — when torch is installed (extra ``bench``).
* ``roofline_ms`` — max(flops / peak FLOP/s, fused GM bytes / bandwidth) with the peak measured
  here at the start (see :func:`measure_machine`) and the bandwidth of a plain copy that moves as
  many bytes as the fused kernel (so a working set that stays in the caches is held to cache
  speed, as a copy of it would be), measured in the row's rounds.

Everything a row times is timed in ``ROUNDS`` interleaved rounds: each round measures every
contender once (a median of ``ROUND_REPEATS`` runs after a warm-up), and a row reports the
median of its rounds. These machines are shared: a busy minute then slows every contender of
the row, not the one that happened to be measured during it, and the ratios hold.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from tilewise.kernels.backends import MeasureOptions, RunResult
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.targets import twin_target
from tilewise.settings import Settings
from tilewise.types import Shape, Tiling

DTYPE = "float32"
DEFAULT_BUDGET = 40  # enough for the search to move most rows off the default (see README)
REPEATS = 7
#: Interleaved rounds per row, and timed runs per contender in a round (after its warm-up).
ROUNDS = 5
ROUND_REPEATS = 3
#: Seconds between two contenders, for the previous one's thread pool to go idle.
SETTLE_S = 0.25
#: Warm-up before a contender's timed runs, in ms of its own runs rather than a count: one run
#: of the shortest kernels is 2 ms, too little to refill the caches the previous contender used.
WARM_MS = 200.0

Timer = Callable[[int], float | None]  # warm-up runs -> median ms of ROUND_REPEATS runs

#: The shapes of issue 6, item 3.
SHAPES: dict[str, list[dict[str, int]]] = {
    "linear_add_gelu": [
        {"M": 1024, "N": 1024, "K": 1024},
        {"M": 512, "N": 4096, "K": 1024},
        {"M": 128, "N": 4096, "K": 4096},
    ],
    "swiglu": [{"T": 2048, "I": 2752}],
    "swiglu_mlp": [{"T": 512, "H": 1024, "I": 2752}],
    "scale_relu_dropout": [{"N": 16777216}],
    "layernorm_gelu": [{"R": 4096, "H": 1024}],
    "conv_bias_leakyrelu": [
        {"N": 8, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3, "stride": 1, "pad": 1}
    ],
}
MEMORY_BOUND = ("swiglu", "scale_relu_dropout", "layernorm_gelu")
ROW_KEYS = (
    "op",
    "shape",
    "dtype",
    "default_ms",
    "tuned_ms",
    "numpy_ms",
    "numpy_2t_ms",
    "torch_eager_ms",
    "torch_compile_ms",
    "roofline_ms",
)

Fn = Callable[[], object]


# -- timing ------------------------------------------------------------------------------------
def median_ms(fn: Fn, *, repeats: int = REPEATS, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def best_ms(fn: Fn, *, repeats: int = REPEATS, warmup: int = 1) -> float:
    """The fastest of ``repeats`` runs: what the machine can do, which the load of other
    processes can only hide (machine figures use this; the kernels and baselines use medians)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _halves(fn: Callable[[slice], object], rows: int, pool: ThreadPoolExecutor) -> Fn:
    mid = rows // 2
    parts = (slice(0, mid), slice(mid, rows))

    def run() -> None:
        for f in [pool.submit(fn, p) for p in parts]:
            f.result()

    return run


# -- the machine -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    peak_flops: float  # FLOP/s, float32 matmul (2·n³ per n×n×n product)
    bandwidth: float  # B/s, best of numpy copy and add, 1 and 2 threads, streams beyond the caches
    how: str
    #: B/s of a copy that moves the given number of bytes; None: ``bandwidth`` for every size.
    stream: Callable[[int], float] | None = None
    #: The same measured afresh at each call (a row's rounds); None: ``bandwidth_for``.
    probe: Callable[[int], float] | None = None

    def bandwidth_for(self, nbytes: float) -> float:
        """The bandwidth a kernel moving ``nbytes`` is held to: that of a copy of the same size
        when it is faster (the working set fits a cache), else the large-stream bandwidth."""
        if self.stream is None:
            return self.bandwidth
        return max(self.bandwidth, self.stream(int(nbytes)))

    def roofline_ms(self, flops: float, nbytes: float, bandwidth: float | None = None) -> float:
        """max(compute time, memory time); the memory time at ``bandwidth`` when given (one
        measured beside the kernel), else at :meth:`bandwidth_for`."""
        bandwidth = bandwidth or self.bandwidth_for(nbytes)
        return max(flops / self.peak_flops, nbytes / bandwidth) * 1e3

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_gflops": round(self.peak_flops / 1e9, 2),
            "bandwidth_gbs": round(self.bandwidth / 1e9, 2),
            "how": self.how,
        }


def _matmul_flops_per_s(n: int) -> float:
    """The best of numpy's and (when installed) torch's n×n×n float32 matmul: 2n³ / fastest run."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    c = np.empty_like(a)
    best = best_ms(lambda: np.matmul(a, a, out=c), repeats=5)
    try:
        import torch
    except ImportError:
        return 2 * n**3 / (best / 1e3)
    torch.set_num_threads(os.cpu_count() or 1)
    ta, tc = torch.from_numpy(a), torch.from_numpy(c)
    best = min(best, best_ms(lambda: torch.matmul(ta, ta, out=tc), repeats=5))
    return 2 * n**3 / (best / 1e3)


def _stream_bytes_per_s(n: int, pool: ThreadPoolExecutor) -> float:
    """Best of numpy copy (2·size bytes moved) and add (3·size) of ``n`` float32 elements, whole
    on one thread and in two halves on two threads."""
    x = np.ones(n, np.float32)
    y = np.ones(n, np.float32)
    z = np.empty(n, np.float32)
    size = x.nbytes
    cases: list[tuple[Callable[[slice], object], int]] = [
        (lambda s: np.copyto(z[s], x[s]), 2),
        (lambda s: np.add(x[s], y[s], out=z[s]), 3),
    ]
    best = 0.0
    for fn, passes in cases:
        one = best_ms(partial(fn, slice(0, n))) / 1e3
        two = best_ms(_halves(fn, n, pool)) / 1e3
        best = max(best, passes * size / one, passes * size / two)
    return best


def probe_bandwidth(nbytes: int) -> float:
    """B/s of the streams of :func:`_stream_bytes_per_s` sized so that a copy moves ``nbytes``."""
    with ThreadPoolExecutor(2) as pool:
        return _stream_bytes_per_s(max(nbytes // 8, 1 << 16), pool)


copy_bandwidth = lru_cache(maxsize=32)(probe_bandwidth)


def measure_machine(
    *, matmul_sizes: tuple[int, ...] = (2048, 4096), n_stream: int = 1 << 26
) -> Machine:
    """Peak: float32 n×n×n matmuls (numpy's BLAS and torch's when installed, all cores), 2n³
    flops over the fastest run, the best over the sizes. Bandwidth: numpy copy (2·size bytes
    moved) and add (3·size) of ``n_stream`` float32 elements, whole on one thread and in two
    halves on two threads; the best of the four (fastest runs). Per kernel, the same streams
    sized to the kernel's bytes (:func:`copy_bandwidth`) when that is faster."""
    peak = max(_matmul_flops_per_s(n) for n in matmul_sizes)
    with ThreadPoolExecutor(2) as pool:
        best = _stream_bytes_per_s(n_stream, pool)
    how = (
        f"peak: best over n in {matmul_sizes} of the fastest float32 n^3 matmul, np.matmul "
        "and torch.matmul when installed (2n^3 flops); bandwidth: best of "
        f"np.copyto (2 x bytes) and np.add (3 x bytes) on {n_stream} float32 "
        "(256 MiB arrays), 1 thread and 2 threads on halves, fastest runs; per kernel the same "
        "streams sized to move the kernel's fused bytes when that is faster (caches)"
    )
    return Machine(peak, best, how, stream=copy_bandwidth, probe=probe_bandwidth)


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count()}


# -- numpy unfused -----------------------------------------------------------------------------
S2PI = np.float32(np.sqrt(2.0 / np.pi))


def _gelu_tanh(x: np.ndarray, t: np.ndarray) -> None:
    """In place on x, t a scratch of x's shape: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))."""
    np.multiply(x, x, out=t)
    t *= x
    t *= np.float32(0.044715)
    t += x
    t *= S2PI
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= np.float32(0.5)
    x *= t


def _silu_into(g: np.ndarray, s: np.ndarray) -> None:
    """s = g / (1 + exp(-g))."""
    np.negative(g, out=s)
    np.exp(s, out=s)
    s += np.float32(1.0)
    np.divide(g, s, out=s)


def numpy_cases(
    spec: OpSpec, shape: Shape, inputs: Mapping[str, np.ndarray], pool: ThreadPoolExecutor
) -> tuple[Fn, Fn | None]:
    """(one thread, two threads or None) callables of the unfused op, buffers preallocated."""
    f32 = np.float32
    name = spec.name
    if name == "linear_add_gelu":
        m, n, k = shape["M"], shape["N"], shape["K"]
        x, w, b = inputs["x"].reshape(m, k), inputs["w"].reshape(k, n), inputs["bias"]
        c, t = np.empty((m, n), f32), np.empty((m, n), f32)

        def lag() -> None:
            np.matmul(x, w, out=c)  # MatMul
            np.add(c, b, out=c)  # Add
            _gelu_tanh(c, t)  # Gelu

        return lag, None
    if name == "swiglu_mlp":
        tt, h, i = shape["T"], shape["H"], shape["I"]
        x, wg, wu = inputs["x"].reshape(tt, h), inputs["wg"].reshape(h, i), inputs["wu"]
        wu = wu.reshape(h, i)
        g, u, s = (np.empty((tt, i), f32) for _ in range(3))

        def mlp() -> None:
            np.matmul(x, wg, out=g)
            np.matmul(x, wu, out=u)
            _silu_into(g, s)
            np.multiply(s, u, out=s)

        return mlp, None
    if name == "conv_bias_leakyrelu":
        from tilewise.kernels.ops.conv_bias_leakyrelu.spec import ALPHA, out_size

        nn, cc, hh, ww, kk = (shape[d] for d in ("N", "C", "H", "W", "K"))
        r, s_, st, pad = shape["R"], shape["S"], shape["stride"], shape["pad"]
        oh, ow = out_size(shape)
        x4 = inputs["x"].reshape(nn, cc, hh, ww)
        wmat = inputs["w"].reshape(kk, cc * r * s_)
        bias = inputs["bias"].reshape(1, kk, 1)
        xp = np.zeros((nn, cc, hh + 2 * pad, ww + 2 * pad), f32)
        col = np.empty((nn, cc, r, s_, oh, ow), f32)
        win = np.lib.stride_tricks.sliding_window_view(xp, (r, s_), axis=(2, 3))[
            :, :, ::st, ::st
        ].transpose(0, 1, 4, 5, 2, 3)
        col2 = col.reshape(nn, cc * r * s_, oh * ow)
        out, t = np.empty((nn, kk, oh * ow), f32), np.empty((nn, kk, oh * ow), f32)
        interior = xp[:, :, pad : pad + hh, pad : pad + ww]
        alpha = f32(ALPHA)

        def conv() -> None:
            np.copyto(interior, x4)  # Im2col: pad ...
            np.copyto(col, win)  # ... and gather
            np.matmul(wmat, col2, out=out)  # MatMul
            np.add(out, bias, out=out)  # Add bias
            np.multiply(out, alpha, out=t)  # LeakyRelu (alpha < 1)
            np.maximum(out, t, out=out)

        return conv, None
    if name == "swiglu":
        tt, i = shape["T"], shape["I"]
        g, u = inputs["g"].reshape(tt, i), inputs["u"].reshape(tt, i)
        s = np.empty((tt, i), f32)

        def sw(p: slice) -> None:
            _silu_into(g[p], s[p])  # Silu
            np.multiply(s[p], u[p], out=s[p])  # Mul

        return (lambda: sw(slice(0, tt))), _halves(sw, tt, pool)
    if name == "scale_relu_dropout":
        from tilewise.kernels.ops.scale_relu_dropout.spec import DROP_P, SCALE

        n = shape["N"]
        x = inputs["x"]
        y, r01 = np.empty(n, f32), np.empty(n, f32)
        keep = np.empty(n, np.bool_)
        rngs = [np.random.default_rng(i) for i in range(2)]

        def srd(p: slice) -> None:
            rng = rngs[0 if p.start == 0 else 1]
            np.multiply(x[p], f32(SCALE), out=y[p])  # Muls
            np.maximum(y[p], f32(0.0), out=y[p])  # Relu
            rng.random(dtype=f32, out=r01[p])  # DropOutGenMask: uniform bits ...
            np.greater_equal(r01[p], f32(DROP_P), out=keep[p])  # ... to a byte mask
            np.multiply(y[p], keep[p], out=y[p])  # DropOutDoMask: mask ...
            y[p] *= f32(1.0 / (1.0 - DROP_P))  # ... and 1/(1-p)

        return (lambda: srd(slice(0, n))), _halves(srd, n, pool)
    if name == "layernorm_gelu":
        from tilewise.kernels.ops.layernorm_gelu.spec import EPS

        rr, hh = shape["R"], shape["H"]
        x = inputs["x"].reshape(rr, hh)
        gamma, beta = inputs["gamma"], inputs["beta"]
        y, t = np.empty((rr, hh), f32), np.empty((rr, hh), f32)
        mean, var = np.empty((rr, 1), f32), np.empty((rr, 1), f32)

        def ln(p: slice) -> None:
            xs, ys, ts, ms, vs = x[p], y[p], t[p], mean[p], var[p]
            np.mean(xs, axis=1, keepdims=True, out=ms)  # LayerNorm ...
            np.subtract(xs, ms, out=ys)
            np.multiply(ys, ys, out=ts)
            np.mean(ts, axis=1, keepdims=True, out=vs)
            vs += f32(EPS)
            np.sqrt(vs, out=vs)
            np.divide(ys, vs, out=ys)
            ys *= gamma
            ys += beta  # ... then Gelu
            _gelu_tanh(ys, ts)

        return (lambda: ln(slice(0, rr))), _halves(ln, rr, pool)
    raise ValueError(f"no numpy baseline for {name}")


# -- torch -------------------------------------------------------------------------------------
def torch_case(spec: OpSpec, shape: Shape, inputs: Mapping[str, np.ndarray]) -> Any:
    """The op as a function of torch tensors, one torch call per original operator."""
    import torch
    import torch.nn.functional as F

    name = spec.name
    args: tuple[Any, ...]
    tens = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
    if name == "linear_add_gelu":
        m, n, k = shape["M"], shape["N"], shape["K"]
        args = (tens["x"].view(m, k), tens["w"].view(k, n), tens["bias"])

        def f(*a: Any) -> Any:
            x, w, b = a
            return F.gelu(torch.matmul(x, w) + b, approximate="tanh")

    elif name == "swiglu_mlp":
        tt, h, i = shape["T"], shape["H"], shape["I"]
        args = (tens["x"].view(tt, h), tens["wg"].view(h, i), tens["wu"].view(h, i))

        def f(*a: Any) -> Any:
            x, wg, wu = a
            return F.silu(torch.matmul(x, wg)) * torch.matmul(x, wu)

    elif name == "conv_bias_leakyrelu":
        from tilewise.kernels.ops.conv_bias_leakyrelu.spec import ALPHA

        nn, cc, hh, ww, kk = (shape[d] for d in ("N", "C", "H", "W", "K"))
        r, s_, st, pad = shape["R"], shape["S"], shape["stride"], shape["pad"]
        args = (
            tens["x"].view(nn, cc, hh, ww),
            tens["w"].view(kk, cc, r, s_),
            tens["bias"].view(1, kk, 1, 1),
        )

        def f(*a: Any) -> Any:
            x, w, b = a
            return F.leaky_relu(F.conv2d(x, w, stride=st, padding=pad) + b, ALPHA)

    elif name == "swiglu":
        args = (tens["g"], tens["u"])

        def f(*a: Any) -> Any:
            g, u = a
            return F.silu(g) * u

    elif name == "scale_relu_dropout":
        from tilewise.kernels.ops.scale_relu_dropout.spec import DROP_P, SCALE

        args = (tens["x"],)

        def f(*a: Any) -> Any:
            (x,) = a
            return F.dropout(F.relu(x * SCALE), p=DROP_P, training=True)

    elif name == "layernorm_gelu":
        from tilewise.kernels.ops.layernorm_gelu.spec import EPS

        rr, hh = shape["R"], shape["H"]
        args = (tens["x"].view(rr, hh), tens["gamma"], tens["beta"])

        def f(*a: Any) -> Any:
            x, gamma, beta = a
            return F.gelu(F.layer_norm(x, (hh,), gamma, beta, EPS), approximate="tanh")

    else:
        raise ValueError(f"no torch baseline for {name}")
    return f, args


def _keep_freed_memory() -> None:
    """glibc: serve large allocations from the heap and never trim it, so torch's fresh output
    tensors reuse mapped pages instead of page-faulting 4 KiB at a time on every call (numpy's
    baselines preallocate; this gives eager torch the same warm memory)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def torch_callables(
    spec: OpSpec, shape: Shape, inputs: Mapping[str, np.ndarray], notes: list[str]
) -> tuple[Fn | None, Fn | None]:
    """(eager, compiled) calls of the op in torch, compiled already; None where unavailable."""
    try:
        import torch
    except ImportError:
        notes.append("torch not installed (pip install 'tilewise[bench]')")
        return None, None
    torch.set_num_threads(os.cpu_count() or 1)
    _keep_freed_memory()
    f, args = torch_case(spec, shape, inputs)

    def eager() -> None:
        with torch.inference_mode():
            f(*args)

    compiled_call: Fn | None = None
    try:
        compiled: Any = torch.compile(f)
        with torch.inference_mode():
            compiled(*args)  # compile outside the timing

        def compiled_call() -> None:
            with torch.inference_mode():
                compiled(*args)

    except Exception as exc:  # torch.compile's failures are many and varied
        notes.append(
            f"torch.compile failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        )
    return eager, compiled_call


# -- the kernels -------------------------------------------------------------------------------
def kernel_timer(
    backend: Any, spec: OpSpec, shape: Shape, tiling: Tiling, notes: list[str], label: str
) -> Timer:
    """Times the kernel with ``tiling`` (ms), checking its output against the reference the
    first time; None (and a note) once it failed to build or run."""
    target = twin_target()
    build = backend.build(spec, spec.compile_key(tiling, DTYPE))
    if not build.ok:
        notes.append(f"{label}: build failed: {build.error}")
        return lambda _: None
    state = {"checked": False, "failed": False}

    def measure(warmup: int) -> float | None:
        if state["failed"]:
            return None
        run = backend.run(
            build,
            spec,
            shape=shape,
            dtype=DTYPE,
            target=target,
            tiling=tiling,
            check=not state["checked"],
            measure=MeasureOptions(warmup=warmup, repeats=ROUND_REPEATS, max_seconds=60.0),
        )
        state["checked"] = True
        if not run.ok or run.median_us is None:
            notes.append(f"{label}: {run.status}: {run.error}")
            state["failed"] = True
            return None
        return float(run.median_us) / 1e3

    return measure


def warmups(last_ms: float | None) -> int:
    """Warm-up runs worth WARM_MS of a contender that last took ``last_ms``."""
    if not last_ms:
        return 1
    return max(1, min(100, math.ceil(WARM_MS / last_ms)))


def interleaved(
    contenders: Mapping[str, Timer], rounds: int, *, settle: float = SETTLE_S
) -> dict[str, list[float]]:
    """Each contender once per round, in turn; its values, a round each (empty: never ran).

    ``settle`` seconds pass before each contender: numpy's BLAS and torch keep their worker
    threads spinning for a while after a call (OpenBLAS about 0.1 s), and a contender started
    meanwhile shares the cores with them (a 1024^3 torch matmul took 24 ms right after numpy's
    and 14 ms after a quarter-second pause). A first, untimed visit of every contender learns
    how long it runs (and checks the kernels' output), so that each timed visit starts with
    WARM_MS of warm-up."""
    last = {name: measure(1) for name, measure in contenders.items()}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, measure in contenders.items():
            time.sleep(settle)
            value = measure(warmups(last[name]))
            if value is not None:
                samples[name].append(value)
                last[name] = value
    return samples


def spread(values: list[float]) -> float | None:
    """Interquartile range over the median of a contender's rounds (RunResult.spread, as a
    tuning record states it): how much the machine moved it during the row."""
    if len(values) < 2:
        return None
    pooled = RunResult("ok", tuple(values)).spread
    return None if pooled is None else round(pooled, 3)


def tune_best(
    backend: Any, spec: OpSpec, shape: Shape, settings: Settings, budget: int, seed: int
) -> tuple[Tiling | None, dict[str, Any]]:
    """Tune in a throw-away SQLite database; the best tiling and the run's summary."""
    from tilewise import store
    from tilewise.search import Budget, Tuner

    with tempfile.TemporaryDirectory(prefix="tilewise-bench-") as tmp:
        local = settings.model_copy(update={"db_url": f"sqlite:///{Path(tmp) / 'bench.db'}"})
        db = store.open_store(local.db_url)
        try:
            tuner = Tuner(
                spec=spec,
                shape=shape,
                dtype=DTYPE,
                target=twin_target(),
                backend=backend,
                db=db,
                settings=local,
            )
            result = tuner.run(Budget(budget), seed=seed)
        finally:
            db.close()
    summary = {
        "evaluations": result.progress.evaluations,
        "failed": result.progress.failed,
        "seconds": round(result.seconds, 1),
    }
    return (result.best.tiling if result.best else None), summary


def bench_case(
    op: str,
    shape_dims: Mapping[str, int],
    *,
    backend: Any,
    settings: Settings,
    machine: Machine,
    budget: int = DEFAULT_BUDGET,
    seed: int = 0,
    with_torch: bool = True,
    settle: float = SETTLE_S,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One row: the kernel with the default and the tuned tiling, and every alternative."""
    spec = get_op(op)
    shape = spec.validate_shape(dict(shape_dims))
    target = twin_target()
    notes: list[str] = []
    default = spec.default_tiling(shape, DTYPE, target)

    tuned_tiling, tune_summary = default, None
    if budget > 0:
        log(f"{op} {shape.key()}: tuning, budget {budget}")
        best, tune_summary = tune_best(backend, spec, shape, settings, budget, seed)
        if best is None:
            notes.append("tuning found no tiling that ran; tuned = default")
        else:
            tuned_tiling = best
    inputs = spec.make_inputs(shape, DTYPE, np.random.default_rng(seed))
    traffic = spec.traffic(shape, DTYPE)
    with ThreadPoolExecutor(2) as pool:
        one, two = numpy_cases(spec, shape, inputs, pool)
        eager, compiled = (None, None)
        if with_torch:
            eager, compiled = torch_callables(spec, shape, inputs, notes)
        else:
            notes.append("torch skipped")

        def timed(fn: Fn) -> Timer:
            return lambda warmup: median_ms(fn, repeats=ROUND_REPEATS, warmup=warmup)

        contenders = {"default": kernel_timer(backend, spec, shape, default, notes, "default")}
        if tuned_tiling != default:
            contenders["tuned"] = kernel_timer(backend, spec, shape, tuned_tiling, notes, "tuned")
        for name, fn in (
            ("numpy", one),
            ("numpy_2t", two),
            ("torch_eager", eager),
            ("torch_compile", compiled),
        ):
            if fn is not None:
                contenders[name] = timed(fn)
        probe = machine.probe
        if probe is not None:
            contenders["bandwidth"] = lambda _: probe(traffic.fused_bytes)  # best of its runs
        log(f"{op} {shape.key()}: {ROUNDS} interleaved rounds of {', '.join(contenders)}")
        rounds = interleaved(contenders, ROUNDS, settle=settle)
    got = {name: statistics.median(v) for name, v in rounds.items() if v}
    default_ms = got.get("default")
    tuned_ms = default_ms if tuned_tiling == default else got.get("tuned")
    numpy_ms, numpy_2t_ms = got.get("numpy"), got.get("numpy_2t")
    eager_ms, compiled_ms = got.get("torch_eager"), got.get("torch_compile")

    bandwidth = got.get("bandwidth") or machine.bandwidth_for(traffic.fused_bytes)
    roofline = machine.roofline_ms(traffic.flops, traffic.fused_bytes, bandwidth)
    compute_bound = traffic.flops / machine.peak_flops > traffic.fused_bytes / bandwidth
    row: dict[str, Any] = {
        "op": op,
        "shape": {d: shape[d] for d in spec.dims},
        "dtype": DTYPE,
        "default_ms": _r(default_ms),
        "tuned_ms": _r(tuned_ms),
        "numpy_ms": _r(numpy_ms),
        "numpy_2t_ms": _r(numpy_2t_ms),
        "torch_eager_ms": _r(eager_ms),
        "torch_compile_ms": _r(compiled_ms),
        "roofline_ms": _r(roofline),
        # Beyond the schema of issue 6: what the verdicts need.
        "bound": "compute" if compute_bound else "memory",
        "budget": budget,
        "tune": tune_summary,
        "default_tiling": dict(default),
        "tuned_tiling": dict(tuned_tiling),
        "fused_bytes": traffic.fused_bytes,
        "bandwidth_gbs": round(bandwidth / 1e9, 2),  # what roofline and bw_fraction use
        "flops": traffic.flops,
        "matmul_flops": _matmul_flops(op, shape),
        "rounds": ROUNDS,
        "spread": {name: spread(v) for name, v in rounds.items() if v},
        "notes": notes,
    }
    row.update(goal_fractions(row, machine))
    return row


def _r(value: float | None) -> float | None:
    # Four significant digits: µs resolution at ms scale, and tiny shapes do not round to 0.
    return None if value is None else float(f"{value:.4g}")


def _matmul_flops(op: str, shape: Shape) -> int:
    if op == "linear_add_gelu":
        return 2 * shape["M"] * shape["N"] * shape["K"]
    if op == "swiglu_mlp":
        return 4 * shape["T"] * shape["H"] * shape["I"]
    if op == "conv_bias_leakyrelu":
        from tilewise.kernels.ops.conv_bias_leakyrelu.spec import out_size

        oh, ow = out_size(shape)
        crs = shape["C"] * shape["R"] * shape["S"]
        return 2 * shape["N"] * shape["K"] * oh * ow * crs
    return 0


def goal_fractions(row: Mapping[str, Any], machine: Machine) -> dict[str, Any]:
    """Issue 6 item 4: memory-bound chains as a fraction of the measured bandwidth (fused bytes
    over the tuned time, against the bandwidth the row's roofline used); matmul ops as a
    fraction of the measured peak (2·MNK-type flops of the matmul part over the whole tuned
    time, so the epilogue counts against it)."""
    tuned = row["tuned_ms"]
    others = [
        row[k]
        for k in ("numpy_ms", "numpy_2t_ms", "torch_eager_ms", "torch_compile_ms")
        if row[k] is not None
    ]
    out: dict[str, Any] = {"bw_fraction": None, "peak_fraction": None, "best_alternative_ms": None}
    if others:
        out["best_alternative_ms"] = min(others)
    if tuned is None:
        return out
    if row["op"] in MEMORY_BOUND:
        bandwidth = row["bandwidth_gbs"] * 1e9
        out["bw_fraction"] = round(row["fused_bytes"] / (tuned / 1e3) / bandwidth, 3)
    elif row["matmul_flops"]:
        out["peak_fraction"] = round(row["matmul_flops"] / (tuned / 1e3) / machine.peak_flops, 3)
    return out


def cases(op: str | None) -> list[tuple[str, dict[str, int]]]:
    if op is not None and op not in SHAPES:
        from tilewise.errors import InputError

        raise InputError(f"unknown op {op!r}; one of {', '.join(SHAPES)}")
    return [(name, s) for name, shapes in SHAPES.items() if op in (None, name) for s in shapes]


# -- the command -------------------------------------------------------------------------------
def command(
    op: Annotated[
        str | None, typer.Option("--op", help="One op; default: all six at issue 6's shapes.")
    ] = None,
    budget: Annotated[
        int,
        typer.Option(help="Tune evaluations per shape (temporary database); 0 = no tuning."),
    ] = DEFAULT_BUDGET,
    seed: Annotated[int, typer.Option(help="Sampler and input seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of rows.")] = False,
) -> None:
    """Time each op's twin kernel (default and tuned tiling) against numpy, torch and the
    roofline of this machine, fp32."""
    from tilewise.cli import _fail, err, out
    from tilewise.errors import InputError, TilewiseError
    from tilewise.kernels.backends import create_backend
    from tilewise.settings import get_settings

    try:
        if budget < 0:
            raise InputError(f"budget must be 0 or more, got {budget}")
        todo = cases(op)
        settings = get_settings()
        backend = create_backend("cpu-twin")
    except TilewiseError as exc:
        _fail(str(exc))

    def log(message: str) -> None:
        err.print(f"  {message}", highlight=False, markup=False)

    started = time.perf_counter()
    log("measuring the machine: peak FLOP/s and bandwidth")
    machine = measure_machine()
    log(
        f"peak {machine.peak_flops / 1e9:.1f} GFLOP/s, bandwidth "
        f"{machine.bandwidth / 1e9:.1f} GB/s ({machine.how})"
    )
    rows = []
    with backend:
        for name, dims in todo:
            rows.append(
                bench_case(
                    name,
                    dims,
                    backend=backend,
                    settings=settings,
                    machine=machine,
                    budget=budget,
                    seed=seed,
                    log=log,
                )
            )
    log(f"done in {time.perf_counter() - started:.0f} s")
    if as_json:
        print(json.dumps(rows))
        return
    wide = Console(width=max(out.width, 200))
    wide.print(table(rows, machine, budget))
    for row in rows:
        for note in row["notes"]:
            wide.print(f"{row['op']} {_shape_text(row['shape'])}: {note}", markup=False)


def _shape_text(shape: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items() if k not in ("stride", "pad", "R", "S"))


def table(rows: list[dict[str, Any]], machine: Machine, budget: int) -> Table:
    info = machine_info()
    title = (
        f"tilewise bench kernels, fp32, {info['cpu']} ({info['cores']} cores), "
        f"{time.strftime('%Y-%m-%d')}; tuned = best of a {budget}-evaluation tune run; "
        f"peak {machine.peak_flops / 1e9:.1f} GFLOP/s, bandwidth "
        f"{machine.bandwidth / 1e9:.1f} GB/s (measured); medians in ms"
    )
    t = Table(title=title)
    for column in (
        "op",
        "shape",
        "default",
        "tuned",
        "numpy",
        "numpy 2t",
        "torch",
        "compile",
        "roofline",
        "best alt / tuned",
        "roofline / tuned",
        "goal metric",
    ):
        t.add_column(column, justify="left" if column in ("op", "shape") else "right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for row in rows:
        tuned, alt = row["tuned_ms"], row["best_alternative_ms"]
        ratio = f"{alt / tuned:.2f}x" if tuned and alt else "-"
        roof = f"{row['roofline_ms'] / tuned:.0%}" if tuned else "-"
        if row["bw_fraction"] is not None:
            goal = f"{row['bw_fraction']:.0%} of BW"
        elif row["peak_fraction"] is not None:
            goal = f"{row['peak_fraction']:.0%} of peak"
        else:
            goal = "-"
        t.add_row(
            row["op"],
            _shape_text(row["shape"]),
            ms(row["default_ms"]),
            ms(tuned),
            ms(row["numpy_ms"]),
            ms(row["numpy_2t_ms"]),
            ms(row["torch_eager_ms"]),
            ms(row["torch_compile_ms"]),
            ms(row["roofline_ms"]),
            ratio,
            roof,
            goal,
        )
    return t
