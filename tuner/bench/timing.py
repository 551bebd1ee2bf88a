"""Timing for the benchmarks: medians and best runs, and contenders timed in interleaved
rounds, so that a busy moment of a shared machine slows every contender of a row, not the one
that happened to run during it."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from tilewise.kernels.backends import RunResult
from tilewise.kernels.ops._base import Fn
from tilewise.status import RecordStatus

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


def keep_freed_memory() -> None:
    """glibc: serve large allocations from the heap and never trim it, so torch's fresh output
    tensors (and the tilewise ops' fresh output arrays) reuse mapped pages instead of
    page-faulting 4 KiB at a time on every call, as the numpy baselines' preallocated outputs
    do. Process-wide: call it before anything is timed."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


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


def halves(fn: Callable[[slice], object], rows: int, pool: ThreadPoolExecutor) -> Fn:
    """``fn`` over two halves of ``rows`` at once, on ``pool``'s threads."""
    mid = rows // 2
    parts = (slice(0, mid), slice(mid, rows))

    def run() -> None:
        for f in [pool.submit(fn, p) for p in parts]:
            f.result()

    return run


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
    pooled = RunResult(RecordStatus.OK, tuple(values)).spread
    return None if pooled is None else round(pooled, 3)
