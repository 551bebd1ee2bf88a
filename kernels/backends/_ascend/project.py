"""The CMake project of one variant, and the command lines that build and launch it.

A project is a directory with the op's kernel file (copied unmodified), ``CMakeLists.txt``
(``ascendc_library`` with the variant's compile-time defines, and the host runner),
``<op>_tiling.h`` (the host's declaration of the tiling struct, checked field by field against
:meth:`OpSpec.tiling_struct`), ``host_runner.cpp`` and ``launcher.cpp`` (the runner's launch as
a library for the calling process). Everything here is a pure function of the spec and the
defines, so the files are deterministic (no paths, no times) and tests pin them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2

from tilewise.kernels.ops import OpSpec, StructField
from tilewise.kernels.targets import twin_target
from tilewise.types import Shape

TEMPLATES = Path(__file__).resolve().parent / "templates"

C_TYPES: dict[str, str] = {"i": "int32_t", "I": "uint32_t", "f": "float"}
ROLE_CODES: dict[str, int] = {"in": 0, "out": 1, "workspace": 2}

#: System workspace the Matmul high-level API needs in front of the user workspace
#: (``PlatformAscendC::GetLibApiWorkSpaceSize()``: 16 MiB on Ascend 910B).
MATMUL_SYS_WORKSPACE = 16 * 1024 * 1024


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # C++ and CMake, not HTML
    )


@dataclass(frozen=True)
class CField:
    name: str  # as written in C, "cube.baseM"
    leaf: str  # "baseM"
    ctype: str
    offset: int


@dataclass(frozen=True)
class CMember:
    """A struct member: a field, or a nested struct of fields (``cube`` in ``cube.baseM``)."""

    name: str
    ctype: str = ""
    fields: tuple[CField, ...] = ()


def struct_layout(spec: OpSpec) -> tuple[StructField, ...]:
    """The fields of the tiling struct (names and codes; the values are of a unit problem)."""
    unit, target = Shape({d: 1 for d in spec.dims}), twin_target()
    return spec.tiling_struct(spec.default_tiling(unit, "float32", target), unit, "float32", target)


def _members(fields: Sequence[CField]) -> tuple[CMember, ...]:
    members: list[CMember] = []
    for field in fields:
        head, dot, rest = field.name.partition(".")
        if not dot:
            members.append(CMember(field.name, ctype=field.ctype))
            continue
        if "." in rest:
            raise ValueError(f"tiling field {field.name}: only one level of nesting is supported")
        if members and members[-1].fields and members[-1].name == head:
            last = members.pop()
            members.append(CMember(head, fields=(*last.fields, field)))
        elif any(m.name == head for m in members):
            raise ValueError(f"tiling field {field.name}: the fields of {head} are not contiguous")
        else:
            members.append(CMember(head, fields=(field,)))
    return tuple(members)


def tiling_header_name(spec: OpSpec) -> str:
    return f"{spec.name}_tiling.h"


def tiling_header(spec: OpSpec) -> str:
    fields = [
        CField(f.name, f.name.rpartition(".")[2], C_TYPES[f.code], 4 * i)
        for i, f in enumerate(struct_layout(spec))
    ]
    return (
        _environment()
        .get_template("tiling.h.j2")
        .render(
            op=spec.name,
            guard=spec.name.upper(),
            tiling_type=spec.tiling_type,
            kernel_file=spec.kernel_file,
            members=_members(fields),
            fields=fields,
            size=4 * len(fields),
        )
    )


def _launch_source(spec: OpSpec, template: str) -> str:
    unit = Shape({d: 1 for d in spec.dims})
    gm = [
        {"name": arg.name, "role_code": ROLE_CODES[arg.role]}
        for arg in spec.gm_args(unit, "float32")
    ]
    return (
        _environment()
        .get_template(template)
        .render(
            entry=spec.entry,
            kernel_file=spec.kernel_file,
            tiling_type=spec.tiling_type,
            tiling_header=tiling_header_name(spec),
            gm=gm,
            mix=spec.mix,
        )
    )


def host_runner_source(spec: OpSpec) -> str:
    return _launch_source(spec, "host_runner.cpp.j2")


def launcher_source(spec: OpSpec) -> str:
    """The in-process launcher (``liblauncher.so``): the host runner's launch as a C ABI."""
    return _launch_source(spec, "launcher.cpp.j2")


def cmake_lists(spec: OpSpec, defines: Mapping[str, str]) -> str:
    for name, value in defines.items():
        if not name.isidentifier() or any(c in value for c in " \t\n\r\"'$;()#\\"):
            raise ValueError(f"define {name}={value!r} is not a plain macro")
    return (
        _environment()
        .get_template("CMakeLists.txt.j2")
        .render(op=spec.name, kernel_file=spec.kernel_file, defines=sorted(defines.items()))
    )


def project_files(spec: OpSpec, defines: Mapping[str, str]) -> dict[str, str]:
    """Generated files by name (the kernel file is copied next to them, unmodified)."""
    return {
        "CMakeLists.txt": cmake_lists(spec, defines),
        tiling_header_name(spec): tiling_header(spec),
        "host_runner.cpp": host_runner_source(spec),
        "launcher.cpp": launcher_source(spec),
    }


def write_project(spec: OpSpec, defines: Mapping[str, str], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in project_files(spec, defines).items():
        (directory / name).write_text(text)
    (directory / spec.kernel_file).write_bytes(spec.kernel_path.read_bytes())


def sys_workspace_bytes(spec: OpSpec) -> int:
    return MATMUL_SYS_WORKSPACE if spec.mix else 0


# -- command lines ----------------------------------------------------------------------------
def configure_command(
    *, source: Path, build: Path, soc: str, run_mode: str, toolkit_home: Path, cmake: str = "cmake"
) -> list[str]:
    return [
        cmake,
        "-S",
        str(source),
        "-B",
        str(build),
        f"-DSOC_VERSION={soc}",
        f"-DRUN_MODE={run_mode}",
        f"-DASCEND_CANN_PACKAGE_PATH={toolkit_home}",
        "-DCMAKE_BUILD_TYPE=Release",
    ]


def build_command(*, build: Path, cmake: str = "cmake") -> list[str]:
    return [cmake, "--build", str(build), "-j"]


def runner_command(
    binary: Path,
    *,
    device: int,
    block_dim: int,
    tiling: bytes,
    check: bool,
    warmup: int,
    repeats: int,
    max_seconds: float,
    sys_workspace: int,
    gm_tokens: Sequence[str],
) -> list[str]:
    """The host runner's argv; ``gm_tokens`` is ``path bytes`` per GM arg (Problem.gm_tokens)."""
    return [
        str(binary),
        "--device",
        str(device),
        "--block-dim",
        str(block_dim),
        "--tiling",
        tiling.hex(),
        "--check",
        str(int(check)),
        "--warmup",
        str(warmup),
        "--repeats",
        str(repeats),
        "--max-seconds",
        f"{max_seconds:.3f}",
        "--sys-workspace",
        str(sys_workspace),
        "--",
        *gm_tokens,
    ]
