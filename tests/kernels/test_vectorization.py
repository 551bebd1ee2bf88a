"""The twin's element loops vectorize: clang's vectorization remarks over every op's kernel.

A loop the twin marks ``TW_IVDEP`` (element-wise: dst may be src, never a shifted overlap) is
one the twin means to run in vector registers, as the Ascend vector unit runs it 256 bytes at a
time. Each op's kernel is compiled as the cpu-twin backend compiles it, for float and half, with
``-Rpass=loop-vectorize -Rpass-missed=loop-vectorize``; every marked loop a kernel instantiates
must be reported vectorized and never "not vectorized", and every marked loop must be
instantiated by some kernel (so the check cannot pass by matching nothing).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from tilewise.kernels.backends._compiler import find_compiler
from tilewise.kernels.backends._cpu_twin import TWIN_DIR, shim_source
from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.ops._base import C_DTYPES

pytestmark = pytest.mark.slow

Loop = tuple[str, int]  # (header path relative to kernels/twin, line of the `for`)
_REMARK = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):\d+: remark: (?P<text>.*?) \[-R")


def marked_loops() -> set[Loop]:
    """The ``for`` after each ``TW_IVDEP`` (or ``TW_IVDEP_LONG``) line of the twin's headers."""
    loops: set[Loop] = set()
    for header in sorted((TWIN_DIR / "twin").glob("*.h")):
        lines = header.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() not in ("TW_IVDEP", "TW_IVDEP_LONG"):
                continue
            following = next(j for j in range(i + 1, len(lines)) if lines[j].strip())
            assert lines[following].lstrip().startswith("for ("), (header.name, following + 1)
            loops.add((header.relative_to(TWIN_DIR).as_posix(), following + 1))
    return loops


@cache
def remarks(op: str, dtype: str) -> dict[Loop, set[str]]:
    """Per twin source line, what clang said of the loops there in this op's kernel."""
    compiler = find_compiler()
    spec = get_op(op)
    flags = [*compiler.flags(), f"-I{TWIN_DIR}", f"-DDTYPE_X={C_DTYPES[dtype]}"]
    flags += ["-Rpass=loop-vectorize", "-Rpass-missed=loop-vectorize"]
    with tempfile.TemporaryDirectory(prefix="tw-vec-") as tmp:
        work = Path(tmp)
        (work / "variant.cpp").write_text(shim_source(spec))
        done = subprocess.run(
            [compiler.path, *flags, "-c", "variant.cpp", "-o", "variant.o"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    said: dict[Loop, set[str]] = defaultdict(set)
    root = TWIN_DIR.resolve()
    for line in done.stderr.splitlines():
        match = _REMARK.match(line)
        if not match:
            continue
        path = Path(os.path.normpath(work / match["file"])).resolve()
        if root in path.parents:
            key = (path.relative_to(root).as_posix(), int(match["line"]))
            said[key].add("vectorized" if match["text"].startswith("vectorized loop") else "not")
    return said


needs_clang = pytest.mark.skipif(
    find_compiler().kind != "clang", reason="vectorization remarks are clang's (-Rpass)"
)
OPS = [spec.name for spec in list_ops()]


def test_the_marker_finds_the_element_loops() -> None:
    loops = marked_loops()
    files = {f for f, _ in loops}
    assert {"twin/vec.h", "twin/activation.h", "twin/cmpsel.h", "twin/matmul.h"} <= files
    assert len(loops) >= 10


@needs_clang
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", OPS)
def test_every_marked_loop_a_kernel_uses_is_vectorized(op: str, dtype: str) -> None:
    said = remarks(op, dtype)
    missed = {loop: what for loop, what in said.items() if loop in marked_loops() and "not" in what}
    assert not missed, f"{op} {dtype}: marked loops not vectorized: {sorted(missed)}"


@needs_clang
def test_every_marked_loop_is_used_by_some_kernel() -> None:
    seen = {loop for op in OPS for dtype in ("float32", "float16") for loop in remarks(op, dtype)}
    assert marked_loops() <= seen, sorted(marked_loops() - seen)
