"""The GM buffers of one (op, shape, dtype): inputs, outputs and the reference answer.

Buffers are files in shared memory that the runner maps, so no tensor is copied through a pipe
and the outputs can be checked here after a launch. (The runner launches kernels on its own
huge-page copy of each buffer and copies it back when the request ends: see runner.cpp.)
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tilewise.kernels.ops import GmArg, OpSpec
from tilewise.types import Shape

INPUT_SEED = 20260522


def _shm_dir() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


@dataclass
class CheckOutcome:
    ok: bool
    max_error: float
    detail: str


class Problem:
    def __init__(self, spec: OpSpec, shape: Shape, dtype: str) -> None:
        self.spec, self.shape, self.dtype = spec, shape, dtype
        self.args: tuple[GmArg, ...] = spec.gm_args(shape, dtype)
        self.dir = Path(tempfile.mkdtemp(prefix="tilewise-", dir=_shm_dir()))
        self.paths: dict[str, Path] = {}
        inputs = spec.make_inputs(shape, dtype, np.random.default_rng(INPUT_SEED))
        for arg in self.args:
            if arg.role == "workspace":
                continue
            path = self.dir / f"{arg.name}.bin"
            data = inputs[arg.name] if arg.role == "in" else np.zeros(arg.elements, arg.dtype)
            np.ascontiguousarray(data, dtype=arg.dtype).tofile(path)
            self.paths[arg.name] = path
        # Compared in float32: exact for float16 outputs, and a quarter of the float64 traffic.
        self.reference = {
            name: np.ascontiguousarray(value, dtype=np.float32).reshape(-1)
            for name, value in spec.reference(inputs, shape, dtype).items()
        }

    def gm_tokens(self) -> list[str]:
        """``path bytes`` per GM argument, in call order, as the runner protocol wants."""
        tokens: list[str] = []
        for arg in self.args:
            path = "-" if arg.role == "workspace" else str(self.paths[arg.name])
            tokens += [path, str(arg.nbytes)]
        return tokens

    def _output(self, arg: GmArg, mode: Literal["r", "r+"]) -> np.memmap[Any, np.dtype[Any]]:
        view: np.memmap[Any, np.dtype[Any]] = np.memmap(
            str(self.paths[arg.name]), dtype=np.dtype(arg.dtype), mode=mode, shape=(arg.elements,)
        )
        return view

    def poison_outputs(self) -> None:
        """Fill outputs with NaN so an element the kernel never writes is caught."""
        for arg in self.args:
            if arg.role == "out":
                out = self._output(arg, "r+")
                out[:] = np.nan
                out.flush()
                del out

    def check_outputs(self) -> CheckOutcome:
        rtol, atol = self.spec.tolerance(self.dtype, self.shape)
        worst = 0.0
        for arg in self.args:
            if arg.role != "out":
                continue
            got = np.asarray(self._output(arg, "r"), dtype=np.float32)
            want = self.reference[arg.name]
            error = np.abs(got - want)
            bad = ~(error <= np.float32(atol) + np.float32(rtol) * np.abs(want))  # NaN is bad
            worst = max(worst, float(np.nanmax(error)) if error.size else 0.0)
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                return CheckOutcome(
                    False,
                    float("inf") if np.isnan(error).any() else worst,
                    f"{arg.name}: {int(bad.sum())} of {bad.size} elements wrong, first at "
                    f"{first}: got {got[first]!r}, want {want[first]!r} "
                    f"(rtol {rtol}, atol {atol})",
                )
        return CheckOutcome(True, worst, "")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
