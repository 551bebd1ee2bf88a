"""One simulated device of the fleet benchmark (``bench/fleet.py``): a recorded cpu-twin space
of linear_add_gelu played back through the Backend contract, with a fixed latency per launch.

A run of a tiling sleeps ``latency_s`` (the compile and checked launch of an NPU, which the
worker spends waiting, not computing) and answers the recorded time of that tiling; a re-measure
(an unchecked launch of a build made before) sleeps ``remeasure_s``. Builds cost nothing here:
the latency stands for both.

The recorded spaces fix the tunables that do not change the time at their sizes (see
``bench/record_space.py``), so a tiling is looked up by the tunables that vary in the file. A
workload's shape is played back from the recorded space with the same M and N and the nearest K,
its times scaled by K (the fleet needs more workloads than there are recorded shapes); a tiling
that passes the op's static check there but is not in the file is answered as a crashed launch:
it costs a device latency and an evaluation, as a failed compile does.
"""

from __future__ import annotations

import csv
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tilewise.kernels.backends import Backend, BuildResult, MeasureOptions, RunResult
from tilewise.kernels.ops import OpSpec
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling

OP = "linear_add_gelu"
DTYPE = "float32"
#: The recorded cpu-twin spaces of linear_add_gelu in the repository.
SPACES_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"
_NAME = re.compile(r"^linear_add_gelu_M(\d+)_N(\d+)_K(\d+)\.csv$")
NOT_RECORDED = "simulated device: tiling not in the recorded space"


@dataclass(frozen=True)
class RecordedSpace:
    """One recorded space: its shape, the tunables that vary in it and the time of each."""

    shape: tuple[int, int, int]  # M, N, K
    varying: tuple[str, ...]
    times_ms: dict[tuple[int, ...], float]

    @classmethod
    def load(cls, path: Path) -> RecordedSpace:
        found = _NAME.match(path.name)
        if found is None:
            raise SystemExit(f"{path}: not a recorded space of {OP} (linear_add_gelu_M*_N*_K*.csv)")
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        names = rows[0][:-1]
        configs = [(tuple(int(v) for v in r[:-1]), float(r[-1])) for r in rows[1:]]
        varying = tuple(n for i, n in enumerate(names) if len({c[i] for c, _ in configs}) > 1)
        index = [names.index(n) for n in varying]
        times = {tuple(c[i] for i in index): t for c, t in configs}
        m, n, k = (int(g) for g in found.groups())
        return cls((m, n, k), varying, times)


def load_spaces(directory: Path = SPACES_DIR) -> list[RecordedSpace]:
    spaces = [RecordedSpace.load(p) for p in sorted(directory.glob(f"{OP}_M*_N*_K*.csv"))]
    if not spaces:
        raise SystemExit(f"no recorded space of {OP} in {directory}")
    return spaces


def fleet_shapes(spaces: list[RecordedSpace], count: int) -> list[Shape]:
    """``count`` distinct shapes: the recorded ones first, then their K grown by 32 at a time."""
    shapes = []
    for j in range(count):
        m, n, k = spaces[j % len(spaces)].shape
        shapes.append(Shape({"M": m, "N": n, "K": k + 32 * (j // len(spaces))}))
    return shapes


class ReplayDevice(Backend):
    """The simulated device; counts its launches (thread-safe, read by the report)."""

    name = "fleet-replay"

    def __init__(
        self, spaces: list[RecordedSpace], *, latency_s: float, remeasure_s: float
    ) -> None:
        self.spaces, self.latency_s, self.remeasure_s = spaces, latency_s, remeasure_s
        self._lock = threading.Lock()
        self.evaluations = 0  # checked launches: one per evaluation
        self.not_recorded = 0  # ... of them answered as crashed (not in the recorded space)
        self.remeasures = 0  # unchecked launches (the final re-measure)
        self.busy_s = 0.0  # seconds the device spent on launches

    def _space(self, shape: Shape) -> tuple[RecordedSpace, float]:
        m, n, k = shape["M"], shape["N"], shape["K"]
        same = [s for s in self.spaces if s.shape[:2] == (m, n)] or self.spaces
        space = min(same, key=lambda s: abs(s.shape[2] - k))
        return space, k / space.shape[2]

    def build(self, spec: OpSpec, defines: dict[str, str]) -> BuildResult:
        return BuildResult(ok=True, key=repr(sorted(defines.items())), artifact=Path("/dev/null"))

    def run(
        self,
        build: BuildResult,
        spec: OpSpec,
        *,
        shape: Shape,
        dtype: str,
        target: TargetProfile,
        tiling: Tiling,
        check: bool,
        measure: MeasureOptions,
    ) -> RunResult:
        pause = self.latency_s if check else self.remeasure_s
        time.sleep(pause)
        space, scale = self._space(shape)
        time_ms = space.times_ms.get(tuple(int(tiling[n]) for n in space.varying))
        with self._lock:
            self.busy_s += pause
            if check:
                self.evaluations += 1
                self.not_recorded += time_ms is None
            else:
                self.remeasures += 1
        if time_ms is None or not math.isfinite(time_ms):
            return RunResult("crashed", error=NOT_RECORDED)
        us = time_ms * 1e3 * scale
        samples = tuple(us for _ in range(max(1, measure.repeats)))
        return RunResult("ok", samples, max_error=0.0 if check else None)

    def environment(self) -> dict[str, object]:
        return {"backend": self.name, "latency_s": self.latency_s}

    def counters(self) -> dict[str, float]:
        with self._lock:
            return {
                "evaluations": self.evaluations,
                "not_recorded": self.not_recorded,
                "remeasures": self.remeasures,
                "device_busy_s": round(self.busy_s, 3),
            }
