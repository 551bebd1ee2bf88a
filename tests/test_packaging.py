"""The distribution installs one import package, ``tilewise``, and every module of it imports
from the installed wheel (not from this checkout)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [built] = out.glob("tilewise-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"tilewise"}, sorted(tops)
    # the kernels' sources, the twin's headers, the templates and the migrations come along
    for needed in (
        "tilewise/kernels/ops/linear_add_gelu/linear_add_gelu.cpp",
        "tilewise/kernels/twin/kernel_operator.h",
        "tilewise/kernels/twin/runner/runner.cpp",
        "tilewise/kernels/twin/runner/host_pool.cpp",
        "tilewise/kernels/twin/runner/thread_pool.h",
        "tilewise/kernels/backends/_ascend/templates/CMakeLists.txt.j2",
        "tilewise/api/templates/index.html",
        "tilewise/templates/tiling_table.h.j2",
        "tilewise/migrations/versions/0001_initial.py",
        "tilewise/migrations/alembic.ini",
    ):
        assert needed in names, needed
    [entry_points] = [n for n in names if n.endswith("entry_points.txt")]
    assert "tilewise = tilewise.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.slow
def test_the_installed_wheel_imports_every_module(wheel: Path, tmp_path: Path) -> None:
    """A fresh virtual environment, this one's dependencies made visible through a .pth file,
    the wheel installed without dependencies; run from a directory outside the checkout."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    before = {p.name for p in Path(site).iterdir()}
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    added = {p.name for p in Path(site).iterdir()} - before
    assert {n for n in added if not n.endswith(".dist-info")} == {"tilewise"}, added
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    script = (
        "import importlib, pkgutil, tilewise\n"
        f"assert tilewise.__file__.startswith({site!r}), tilewise.__file__\n"
        "names = [m.name for m in pkgutil.walk_packages(tilewise.__path__, 'tilewise.')]\n"
        "for name in names:\n"
        # Scripts, not modules: Alembic's env (runs only under Alembic), `python -m` entry points
        "    if name != 'tilewise.migrations.env' and not name.endswith('.__main__'):\n"
        "        importlib.import_module(name)\n"
        "print(tilewise.__version__, len(names))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    version, modules = done.stdout.split()
    assert version == "0.1.0" and int(modules) > 60
    done = subprocess.run(
        [str(env_dir / "bin" / "tilewise"), "ops"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "linear_add_gelu" in done.stdout, done.stderr
