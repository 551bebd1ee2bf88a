"""The machine a benchmark runs on: its measured peak FLOP/s and memory bandwidth, which the
roofline of each row is drawn from, and what it is (host, CPU, cores)."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from tilewise.bench.timing import best_ms, halves


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
        two = best_ms(halves(fn, n, pool)) / 1e3
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
