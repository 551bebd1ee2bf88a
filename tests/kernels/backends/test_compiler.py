from __future__ import annotations

from pathlib import Path

from tilewise.kernels.backends._compiler import count_loop_spills, find_compiler, max_stack_frame

REMARKS = """\
variant.cpp:3:1: remark: 5 spills 2.5e+00 total spills cost 7 reloads 3.1e+00 total reloads cost generated in function [-Rpass-missed=regalloc]
matmul.h:80:9: remark: 2 spills 1.0e+00 total spills cost 3 reloads 1.5e+00 total reloads cost generated in loop [-Rpass-missed=regalloc]
matmul.h:80:9: remark: 4 spills 1.0e+00 total spills cost 3 reloads 1.5e+00 total reloads cost generated in loop [-Rpass-missed=regalloc]
vec.h:12:5: remark: 1 spills 1.0e+00 total spills cost generated in loop [-Rpass-missed=regalloc]
vec.h:20:5: remark: 1 reloads 1.0e+00 total reloads cost generated in loop [-Rpass-missed=regalloc]
"""


def test_loop_spills_take_the_largest_report_per_loop() -> None:
    assert count_loop_spills(REMARKS) == 4 + 1
    assert count_loop_spills("") == 0


def test_stack_frame_from_su_file(tmp_path: Path) -> None:
    su = tmp_path / "v.su"
    su.write_text("v.cpp:3:1:kernel\t1024\tstatic\nv.cpp:9:1:helper\t48\tdynamic,bounded\n")
    assert max_stack_frame(su) == 1024
    assert max_stack_frame(tmp_path / "missing.su") is None


def test_auto_finds_a_compiler_that_takes_float16() -> None:
    compiler = find_compiler("auto")
    assert compiler.kind in {"clang", "gcc"}
    assert ("-Rpass-missed=regalloc" in compiler.flags()) == compiler.spill_checks
