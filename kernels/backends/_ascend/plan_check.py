"""A kernel's UB buffer plan, checked by Huawei's AscendNPU IR compiler (``bishengir-compile``).

For an op, tiling and Ascend target, every buffer the kernel's Init allocates in UB is written
as one ``memref.alloc`` in ``#hivm.address_space<ub>``, all live at once (each is loaded from GM
and only stored back after every load), plus one buffer for the UB the high-level APIs keep for
their temporaries. The compiler's memory planner then gives a real verdict in ~0.05 s:

* ``fits``      — planning passed; the run stops where it would call CANN's ``hivmc``, absent here;
* ``overflow``  — ``ub overflow, requires X bits while Y bits available``;
* ``fallback``  — it only fitted after silently dropping multi-buffering: counts as not fitting.

No NPU or CANN is needed. Needs the optional extra: ``pip install tilewise[ascend-ir]``.
:func:`compiler_check` puts the verdict into an op's static check in place of its analytic UB
footprint (the Ascend backend's ``refine_check`` with ``ub_check=compiler``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from tilewise.errors import BackendError, ConfigError
from tilewise.kernels.ops import Buffer, Check, OpSpec
from tilewise.kernels.targets import UB_MIX_RESERVED, UB_RESERVED, TargetProfile
from tilewise.types import Shape, Tiling

#: SoCs the AscendNPU IR compiler's --target accepts: no 310P, no plain 910.
SUPPORTED_SOCS = ("Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4")

_OVERFLOW = re.compile(r"(ub|cbuf) overflow, requires (\d+) bits while (\d+) bits available")
_FITS = "External hivmc run fails"
_FALLBACK = "Ub overflow detected"


@dataclass(frozen=True)
class PlanVerdict:
    verdict: Literal["fits", "overflow", "fallback"]
    required_bytes: int | None = None
    available_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "required_bytes": self.required_bytes,
            "available_bytes": self.available_bytes,
        }


def find_bishengir() -> Path:
    """The ``bishengir-compile`` binary shipped in the ``ascendnpu-ir`` package."""
    try:
        import ascendnpuir
    except ImportError:
        found = shutil.which("bishengir-compile")
        if found:
            return Path(found)
        raise ConfigError(
            "the compiler check needs Huawei's AscendNPU IR compiler: "
            "pip install 'tilewise[ascend-ir]' (package ascendnpu-ir)"
        ) from None
    binary = Path(ascendnpuir.__file__).parent / "bin" / "bishengir-compile"
    if not binary.exists():
        raise ConfigError(f"ascendnpu-ir is installed but {binary} is missing")
    return binary


def ub_plan(
    spec: OpSpec, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
) -> list[Buffer]:
    """The UB buffers of the kernel's Init, plus the UB the high-level APIs reserve."""
    plan = [b for b in spec.buffers(tiling, shape, dtype, target) if b.memory == "ub"]
    reserved = UB_RESERVED + (UB_MIX_RESERVED if spec.mix else 0)
    return [*plan, Buffer("api_reserved", "ub", reserved)]


def plan_mlir(buffers: list[Buffer], *, name: str = "plan") -> str:
    """HIVM-level MLIR in which every buffer is live at the same time."""

    def ty(n: int, space: str) -> str:
        return f"memref<{n}xi8, #hivm.address_space<{space}>>"

    args = [f"%in{i}: {ty(b.nbytes, 'gm')}" for i, b in enumerate(buffers)]
    args += [f"%out{i}: {ty(b.nbytes, 'gm')}" for i, b in enumerate(buffers)]
    body = []
    for i, b in enumerate(buffers):
        body.append(f"    // {b.name}: {b.nbytes} B")
        body.append(f"    %buf{i} = memref.alloc() : {ty(b.nbytes, 'ub')}")
    for i, b in enumerate(buffers):
        gm, ub = ty(b.nbytes, "gm"), ty(b.nbytes, "ub")
        body.append(f"    hivm.hir.load ins(%in{i} : {gm}) outs(%buf{i} : {ub})")
    for i, b in enumerate(buffers):  # stored only after every load: all are live at once
        gm, ub = ty(b.nbytes, "gm"), ty(b.nbytes, "ub")
        body.append(f"    hivm.hir.store ins(%buf{i} : {ub}) outs(%out{i} : {gm})")
    signature = ", ".join(args)
    attrs = "attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>}"
    return (
        "module {\n"
        + f"  func.func @{name}({signature}) {attrs} {{\n"
        + "\n".join(body)
        + "\n    return\n  }\n}\n"
    )


def parse_verdict(output: str) -> PlanVerdict:
    """Read the compiler's verdict from its output; an unknown outcome is a BackendError."""
    match = _OVERFLOW.search(output)
    if match:
        return PlanVerdict("overflow", int(match.group(2)) // 8, int(match.group(3)) // 8)
    if _FALLBACK in output:
        return PlanVerdict("fallback")
    if _FITS in output:
        return PlanVerdict("fits")
    tail = " ".join(output.split())[-400:]
    raise BackendError(f"bishengir-compile gave no verdict: {tail}")


def check_plan(
    spec: OpSpec, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile
) -> PlanVerdict:
    """Run ``bishengir-compile`` on the op's UB plan for ``target``."""
    if target.soc not in SUPPORTED_SOCS:
        known = ", ".join(SUPPORTED_SOCS)
        raise ConfigError(f"the AscendNPU IR compiler has no target {target.soc}; it knows {known}")
    binary = find_bishengir()
    with tempfile.TemporaryDirectory(prefix="tilewise-plan-") as tmp:
        source = Path(tmp) / f"{spec.name}.mlir"
        source.write_text(plan_mlir(ub_plan(spec, tiling, shape, dtype, target), name=spec.name))
        try:
            done = subprocess.run(
                [str(binary), str(source), "-enable-hivm-compile=true", f"--target={target.soc}"],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=tmp,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"bishengir-compile failed to run: {exc}") from exc
    return parse_verdict(done.stdout + done.stderr)


def compiler_check(
    spec: OpSpec, tiling: Tiling, shape: Shape, dtype: str, target: TargetProfile, check: Check
) -> Check:
    """``check`` (the op's static check of ``tiling``) with its UB verdict replaced by
    ``bishengir-compile``'s on the kernel's buffer plan; the other reasons stay."""
    verdict = check_plan(spec, tiling, shape, dtype, target)
    reasons = [r for r in check.reasons if not r.startswith("UB overflow")]
    constraints = dict(check.constraints)
    if verdict.verdict == "fits":
        constraints["ub"] = min(constraints.get("ub", 0.0), 0.0)
    else:
        needed = verdict.required_bytes or check.footprint.ub
        reasons.append(f"UB {verdict.verdict} by bishengir-compile: needs {needed} B")
        constraints["ub"] = max(constraints.get("ub", 0.0), 1e-6)
    return replace(check, valid=not reasons, reasons=tuple(reasons), constraints=constraints)


if __name__ == "__main__":  # pragma: no cover - a debugging aid: print the plan of a default tiling
    from tilewise.kernels.ops import get_op
    from tilewise.kernels.targets import get_target

    op = get_op(sys.argv[1])
    shape_ = op.validate_shape(Shape.parse(sys.argv[2]))
    tgt = get_target("ascend910b1")
    print(plan_mlir(ub_plan(op, op.default_tiling(shape_, "float32", tgt), shape_, "float32", tgt)))
