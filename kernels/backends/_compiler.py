"""The host C++ compiler the cpu-twin builds with, and what it tells about a build."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tilewise.errors import ConfigError

# Newest first: clang 15+ accepts _Float16 on x86 and prints regalloc spill remarks.
_CLANGS = (
    "clang++-21",
    "clang++-20",
    "clang++-19",
    "clang++-18",
    "clang++-17",
    "clang++-16",
    "clang++-15",
    "clang++",
)
_GCCS = ("g++-14", "g++-13", "g++-12", "g++")

_SPILLS_IN_LOOP = re.compile(r"remark: (\d+) spills .*generated in loop")
_VERSION = re.compile(r"version (\d+)\.(\d+)")
_GCC_VERSION = re.compile(r"\) (\d+)\.(\d+)")


@dataclass(frozen=True)
class Compiler:
    path: str
    kind: str  # "clang" or "gcc"
    version: str

    @property
    def spill_checks(self) -> bool:
        return self.kind == "clang"

    def flags(self) -> tuple[str, ...]:
        # 512-bit vectors where the CPU has them (both compilers default to 256-bit loops); no
        # errno from libm, so sqrt and friends vectorize (NaN and infinity semantics stay IEEE);
        # hidden symbols, so calls inside a variant bind directly (twin_launch.h exports the ABI).
        base = (
            "-std=c++17",
            "-O3",
            "-march=native",
            # clang 19 on Sapphire Rapids-class Xeons: a warning about its own host probe
            # ("avx10.1-256 will be promoted to avx10.1-512") in every build log otherwise.
            "-Wno-invalid-feature-combination",
            "-mprefer-vector-width=512",
            "-fno-math-errno",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wall",
            "-Wextra",
            "-fstack-usage",
        )
        return (*base, "-Rpass-missed=regalloc") if self.kind == "clang" else base


def _probe(path: str) -> Compiler | None:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    kind = "clang" if "clang" in out else "gcc"
    # g++ prints "g++ (Debian 12.2.0-14) 12.2.0", clang "... clang version 19.1.7 ..."
    match = (_GCC_VERSION if kind == "gcc" else _VERSION).search(out)
    if not match:
        return None
    major = int(match.group(1))
    if (kind == "clang" and major < 15) or (kind == "gcc" and major < 12):
        return None  # too old for _Float16 on x86
    return Compiler(path=path, kind=kind, version=f"{match.group(1)}.{match.group(2)}")


@lru_cache(maxsize=8)
def find_compiler(setting: str = "auto") -> Compiler:
    """The compiler named by ``setting``, or the best one on PATH for ``auto``."""
    names = (setting,) if setting != "auto" else (*_CLANGS, *_GCCS)
    for name in names:
        path = shutil.which(name)
        if path and (compiler := _probe(path)):
            return compiler
    if setting != "auto":
        raise ConfigError(f"compiler {setting!r} not found or older than clang 15 / g++ 12")
    raise ConfigError(
        "no C++ compiler for the cpu-twin: install clang 15 or newer "
        "(Debian: apt-get install clang-19) or g++ 12 or newer"
    )


def count_loop_spills(remarks: str) -> int:
    """Register spills clang reports inside loops (``-Rpass-missed=regalloc``).

    LLVM reports each loop's spills including those of its inner loops, so only the largest
    figure per source location is kept and nested reports are not added twice.
    """
    per_location: dict[str, int] = {}
    for line in remarks.splitlines():
        match = _SPILLS_IN_LOOP.search(line)
        if match:
            location = line.split(": remark:")[0]
            per_location[location] = max(per_location.get(location, 0), int(match.group(1)))
    return sum(per_location.values())


def max_stack_frame(su_file: Path) -> int | None:
    """The largest frame in a ``-fstack-usage`` report (``file:line:col:fn<TAB>bytes<TAB>kind``)."""
    if not su_file.exists():
        return None
    sizes = [
        int(parts[1])
        for line in su_file.read_text().splitlines()
        if len(parts := line.split("\t")) >= 2 and parts[1].isdigit()
    ]
    return max(sizes, default=0)
