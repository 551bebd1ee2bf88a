"""The generated CMake project and host runner: golden files, C++ well-formedness, argv.

Regenerate the golden files with ``TILEWISE_UPDATE_GOLDEN=1 pytest tests/kernels/backends/ascend``
and review the diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tilewise.kernels.backends._ascend.project import (
    MATMUL_SYS_WORKSPACE,
    build_command,
    cmake_lists,
    configure_command,
    project_files,
    runner_command,
    struct_layout,
    sys_workspace_bytes,
    write_project,
)
from tilewise.kernels.ops import OPS as OPS_REGISTRY
from tilewise.kernels.ops import OpSpec, get_op
from tilewise.kernels.targets import get_target
from tilewise.types import Shape

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
STUB = HERE / "stub"
OPS = ("scale_relu_dropout", "linear_add_gelu")
UPDATE = os.environ.get("TILEWISE_UPDATE_GOLDEN") == "1"


def float32_defines(spec: OpSpec) -> dict[str, str]:
    shape = Shape({d: 256 for d in spec.dims})
    tiling = spec.default_tiling(shape, "float32", get_target("ascend910b1"))
    return spec.compile_key(tiling, "float32")


def generated(op: str) -> dict[str, str]:
    spec = get_op(op)
    return project_files(spec, float32_defines(spec))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["CMakeLists.txt", "host_runner.cpp", "launcher.cpp", "tiling.h"])
def test_golden(op: str, name: str) -> None:
    files = generated(op)
    key = f"{op}_tiling.h" if name == "tiling.h" else name
    text = files[key]
    golden = GOLDEN / op / key
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}; run with TILEWISE_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{key} of {op} changed; TILEWISE_UPDATE_GOLDEN=1 to accept"


@pytest.mark.parametrize("op", OPS)
def test_output_is_deterministic_and_path_free(op: str) -> None:
    first, second = generated(op), generated(op)
    assert first == second
    for text in first.values():
        assert str(Path.home()) not in text and "/work/" not in text and "/tmp" not in text


def test_defines_are_listed_sorted() -> None:
    spec = get_op("scale_relu_dropout")
    text = cmake_lists(spec, {"DTYPE_X": "half", "BUFFER_NUM": "1"})
    assert (
        "ascendc_compile_definitions(kernels PRIVATE\n    BUFFER_NUM=1\n    DTYPE_X=half\n)" in text
    )
    assert "ascendc_library(kernels SHARED scale_relu_dropout.cpp)" in text


@pytest.mark.parametrize("bad", [{"DTYPE_X": "float) evil("}, {"A B": "1"}, {"X": "$ENV{HOME}"}])
def test_defines_must_be_plain_macros(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="not a plain macro"):
        cmake_lists(get_op("scale_relu_dropout"), bad)


def test_nested_fields_become_a_nested_struct() -> None:
    text = generated("linear_add_gelu")["linear_add_gelu_tiling.h"]
    assert "    struct {\n        int32_t usedCoreNum;" in text
    assert "    } cube;\n    int32_t epiRows;\n};" in text
    n = len(struct_layout(get_op("linear_add_gelu")))
    assert f"offsetof(LinearAddGeluTiling, epiRows) == {4 * (n - 1)}" in text


def test_write_project_copies_the_kernel_unmodified(tmp_path: Path) -> None:
    spec = get_op("scale_relu_dropout")
    write_project(spec, float32_defines(spec), tmp_path)
    assert (tmp_path / spec.kernel_file).read_bytes() == spec.kernel_path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "CMakeLists.txt",
        "host_runner.cpp",
        "launcher.cpp",
        "scale_relu_dropout.cpp",
        "scale_relu_dropout_tiling.h",
    ]


GXX = shutil.which("g++")


@pytest.mark.skipif(GXX is None, reason="needs g++")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mode", ["npu", "cpu"])
def test_host_runner_compiles_against_the_acl_stub(op: str, mode: str, tmp_path: Path) -> None:
    """The generated C++ is well-formed, warning-free, and calls ACL with the right types."""
    spec = get_op(op)
    write_project(spec, float32_defines(spec), tmp_path)
    argv = [
        str(GXX),
        "-std=c++17",
        "-fsyntax-only",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{tmp_path}",
        f"-I{STUB}",
        *(["-DTILEWISE_CPU_MODE"] if mode == "cpu" else []),
        str(tmp_path / "host_runner.cpp"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(GXX is None, reason="needs g++")
@pytest.mark.parametrize("op", OPS)
def test_tiling_header_matches_pack_tiling(op: str, tmp_path: Path) -> None:
    """Bytes packed by the spec, read through the generated struct, give the fields back."""
    spec = get_op(op)
    target = get_target("ascend910b1")
    shape = Shape({d: 300 + 7 * i for i, d in enumerate(spec.dims)})
    tiling = spec.default_tiling(shape, "float32", target)
    fields = spec.tiling_struct(tiling, shape, "float32", target)
    write_project(spec, float32_defines(spec), tmp_path)
    prints = "\n".join(
        f'    std::printf("%s\\n", std::to_string(t.{f.name}).c_str());' for f in fields
    )
    (tmp_path / "probe.cpp").write_text(
        f'#include <cstdio>\n#include <cstring>\n#include <string>\n#include "{op}_tiling.h"\n'
        f"int main(int, char** argv) {{\n    {spec.tiling_type} t;\n"
        "    for (size_t k = 0; k < sizeof(t); ++k) {\n"
        "        reinterpret_cast<unsigned char*>(&t)[k] =\n"
        "            static_cast<unsigned char>(std::stoul(std::string(argv[1]).substr(2 * k, 2), nullptr, 16));\n"
        f"    }}\n{prints}\n}}\n"
    )
    exe = tmp_path / "probe"
    subprocess.run(
        [str(GXX), "-std=c++17", "-Wall", "-Werror", str(tmp_path / "probe.cpp"), "-o", str(exe)],
        check=True,
    )
    packed = spec.pack_tiling(tiling, shape, "float32", target).hex()
    out = subprocess.run([str(exe), packed], capture_output=True, text=True, check=True).stdout
    got = [float(v) for v in out.split()]
    assert got == pytest.approx([float(f.value) for f in fields], rel=1e-6)


def test_configure_and_build_commands() -> None:
    assert configure_command(
        source=Path("/c/proj"),
        build=Path("/c/build"),
        soc="Ascend910B2",
        run_mode="npu",
        toolkit_home=Path("/usr/local/Ascend/ascend-toolkit/latest"),
    ) == [
        "cmake",
        "-S",
        "/c/proj",
        "-B",
        "/c/build",
        "-DSOC_VERSION=Ascend910B2",
        "-DRUN_MODE=npu",
        "-DASCEND_CANN_PACKAGE_PATH=/usr/local/Ascend/ascend-toolkit/latest",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    assert build_command(build=Path("/c/build"), cmake="/opt/cmake") == [
        "/opt/cmake",
        "--build",
        "/c/build",
        "-j",
    ]


def test_runner_command() -> None:
    argv = runner_command(
        Path("/c/build/host_runner"),
        device=3,
        block_dim=40,
        tiling=bytes([1, 0, 0, 0, 255]),
        check=True,
        warmup=2,
        repeats=7,
        max_seconds=2.0,
        sys_workspace=0,
        gm_tokens=["/dev/shm/x.bin", "4096", "/dev/shm/y.bin", "4096", "-", "256"],
    )
    assert argv == [
        "/c/build/host_runner",
        "--device",
        "3",
        "--block-dim",
        "40",
        "--tiling",
        "01000000ff",
        "--check",
        "1",
        "--warmup",
        "2",
        "--repeats",
        "7",
        "--max-seconds",
        "2.000",
        "--sys-workspace",
        "0",
        "--",
        "/dev/shm/x.bin",
        "4096",
        "/dev/shm/y.bin",
        "4096",
        "-",
        "256",
    ]


def test_matmul_ops_get_the_system_workspace() -> None:
    assert sys_workspace_bytes(get_op("linear_add_gelu")) == MATMUL_SYS_WORKSPACE
    assert sys_workspace_bytes(get_op("scale_relu_dropout")) == 0


@pytest.mark.skipif(GXX is None, reason="needs g++")
@pytest.mark.parametrize("op", sorted(OPS_REGISTRY))
def test_every_op_generates_a_compilable_runner_and_launcher(op: str, tmp_path: Path) -> None:
    """Every registered op, with a launch header shaped like the one ascendc_library writes."""
    spec = get_op(op)
    write_project(spec, float32_defines(spec), tmp_path)
    unit = Shape({d: 1 for d in spec.dims})
    params = ", ".join(f"void* {arg.name}" for arg in spec.gm_args(unit, "float32"))
    (tmp_path / f"aclrtlaunch_{spec.entry}.h").write_text(
        '#include "acl/acl_base.h"\n#define ACLRT_LAUNCH_KERNEL(kernel) aclrtlaunch_##kernel\n'
        f'extern "C" uint32_t aclrtlaunch_{spec.entry}(uint32_t blockDim, aclrtStream stream, '
        f"{params}, {spec.tiling_type} tiling);\n"
    )
    flags = ["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"]
    for source, mode in (
        ("host_runner.cpp", []),
        ("host_runner.cpp", ["-DTILEWISE_CPU_MODE"]),
        ("launcher.cpp", []),
    ):
        done = subprocess.run(
            [
                str(GXX),
                *flags,
                f"-I{tmp_path}",
                f"-I{STUB}",
                *mode,
                str(tmp_path / source),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{source} {mode}: {done.stderr}"
