"""A test-only op around fault.cpp (mode chooses copy, segfault or hang), shared by the backend
tests and the reliability tests, which extend it with more faults."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tilewise.kernels.ops import Buffer, GmArg, OpSpec, StructField, Traffic, Tunable
from tilewise.kernels.targets import TargetProfile
from tilewise.types import Shape, Tiling


class FaultOp(OpSpec):
    """A test-only op around tests/.../fault.cpp; mode chooses copy, segfault or hang."""

    name, summary, dims, dtypes = "fault", "test kernel", ("N",), ("float32",)
    entry, tiling_type, kernel_file = "fault", "FaultTiling", "fault.cpp"

    @property
    def kernel_path(self) -> Path:
        return Path(__file__).parent / "fault.cpp"

    def runtime_tunables(
        self, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Tunable, ...]:
        return (Tunable("mode", (0, 1, 2), "0 copy, 1 segfault, 2 hang"),)

    def buffers(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[Buffer, ...]:
        return ()

    def rules(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> list[str]:
        return []

    def default_tiling(self, shape: Shape, dtype: str, target: TargetProfile) -> Tiling:
        return Tiling({"mode": 0})

    def gm_args(self, shape: Shape, dtype: str) -> tuple[GmArg, ...]:
        return (
            GmArg("x", "in", shape["N"], "float32"),
            GmArg("y", "out", shape["N"], "float32"),
            GmArg("workspace", "workspace", 32, "uint8"),
        )

    def tiling_struct(
        self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
    ) -> tuple[StructField, ...]:
        return (StructField("length", "i", shape["N"]), StructField("mode", "i", tiling["mode"]))

    def block_dim(self, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile) -> int:
        return 1

    def make_inputs(
        self, shape: Shape, dtype: str, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal(shape["N"]).astype(np.float32)}

    def reference(
        self, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str
    ) -> dict[str, np.ndarray]:
        return {"y": inputs["x"].copy()}

    def traffic(self, shape: Shape, dtype: str) -> Traffic:
        return Traffic(8 * shape["N"], 8 * shape["N"], 0, 1)
