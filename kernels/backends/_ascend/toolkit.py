"""Finding the CANN toolkit: where it is, which version, which run modes it offers.

The toolkit is looked for, in order, at an explicit path, ``$ASCEND_HOME_PATH``,
``$ASCEND_TOOLKIT_HOME``, and the default install roots. A directory counts as a CANN 8.x
toolkit when it holds ``ascendc.cmake`` in one of the places the vendor samples look. A 9.x
layout (``bisheng`` but no ``ascendc.cmake``) is recognised and refused with its own message.

The toolkit's environment comes from its ``set_env.sh``, sourced once in ``bash`` (the path is a
positional argument, never interpolated) and captured with ``env -0``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tilewise.errors import BackendError

RUN_MODES: tuple[str, ...] = ("npu", "sim", "cpu")

#: Where ``ascendc.cmake`` lives under the toolkit, in the order the vendor samples try them.
ASCENDC_CMAKE_DIRS: tuple[str, ...] = (
    "tools/tikcpp/ascendc_kernel_cmake",
    "compiler/tikcpp/ascendc_kernel_cmake",
    "ascendc_devkit/tikcpp/samples/cmake",
)

DEFAULT_ROOTS: tuple[Path, ...] = (
    Path("/usr/local/Ascend/ascend-toolkit/latest"),
    Path.home() / "Ascend" / "ascend-toolkit" / "latest",
    Path("/usr/local/Ascend/cann"),
)

#: Files that name the toolkit version, tried in order (``key=value`` lines).
_VERSION_FILES: tuple[str, ...] = (
    "version.cfg",
    "compiler/version.info",
    "*-linux/ascend_toolkit_install.info",
)
_VERSION_KEY = re.compile(
    r"^\s*(?:version|toolkit_running_version)\s*=\s*\[?([^\]:\s]+)", re.I | re.M
)

#: The one shell command tilewise runs: source set_env.sh ($1), print the environment.
SOURCE_ENV_SCRIPT = 'f="$1"; shift; source "$f" >/dev/null 2>&1 || exit 97; env -0'


@dataclass(frozen=True)
class Toolkit:
    """One CANN 8.x toolkit install."""

    home: Path  # what ASCEND_HOME_PATH points to (e.g. .../ascend-toolkit/latest)
    cmake_dir: Path  # the directory holding ascendc.cmake
    set_env: Path | None  # set_env.sh, when there is one
    version: str

    def simulator_lib(self, soc: str) -> Path:
        return self.home / "tools" / "simulator" / soc / "lib"

    def run_modes(self, soc: str, *, dev_root: Path = Path("/dev")) -> tuple[str, ...]:
        """The run modes this toolkit (and host) offer for ``soc``."""
        modes = []
        if any(dev_root.glob("davinci[0-9]*")):
            modes.append("npu")
        if self.simulator_lib(soc).is_dir():
            modes.append("sim")
        if (self.home / "tools" / "tikicpulib").is_dir():
            modes.append("cpu")
        return tuple(modes)

    def tool(self, name: str, env: Mapping[str, str]) -> Path | None:
        """A toolkit program (``msprof`` ...): on the toolkit's PATH or in its usual places."""
        for directory in env.get("PATH", "").split(os.pathsep):
            if directory and (Path(directory) / name).is_file():
                return Path(directory) / name
        for candidate in (
            self.home / "bin" / name,
            self.home / "tools" / "profiler" / "bin" / name,
        ):
            if candidate.is_file():
                return candidate
        return None

    def environment(self) -> dict[str, str]:
        """The environment to build and run with: set_env.sh applied over ours (cached)."""
        return dict(_sourced_environment(self.set_env, self.home))


def source_env_command(set_env: Path) -> list[str]:
    return ["bash", "-c", SOURCE_ENV_SCRIPT, "bash", str(set_env)]


def parse_env0(data: bytes) -> dict[str, str]:
    """Parse ``env -0`` output (NUL-separated ``KEY=value``; values may hold newlines)."""
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        if sep and key:
            env[key] = value
    return env


@lru_cache(maxsize=8)
def _sourced_environment(set_env: Path | None, home: Path) -> tuple[tuple[str, str], ...]:
    if set_env is None:
        env = dict(os.environ)
    else:
        try:
            done = subprocess.run(
                source_env_command(set_env), capture_output=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"cannot source {set_env}: {exc}") from exc
        if done.returncode != 0:
            raise BackendError(
                f"sourcing {set_env} failed (exit {done.returncode}): "
                + done.stderr.decode(errors="replace")[-500:]
            )
        env = parse_env0(done.stdout)
    env.setdefault("ASCEND_HOME_PATH", str(home))
    return tuple(sorted(env.items()))


def _cmake_dir(home: Path) -> Path | None:
    for sub in ASCENDC_CMAKE_DIRS:
        if (home / sub / "ascendc.cmake").is_file():
            return home / sub
    return None


def _is_9x(home: Path) -> bool:
    return any((home / sub / "bisheng").is_file() for sub in ("bin", "compiler/ccec_compiler/bin"))


def _set_env(home: Path) -> Path | None:
    for candidate in (
        home / "set_env.sh",
        home.parent / "set_env.sh",
        home / "bin" / "setenv.bash",
    ):
        if candidate.is_file():
            return candidate
    return None


def _version(home: Path) -> str:
    for pattern in _VERSION_FILES:
        for path in sorted(home.glob(pattern)):
            found = _VERSION_KEY.search(path.read_text(errors="replace"))
            if found:
                return found.group(1)
    resolved = home.resolve().name  # ".../ascend-toolkit/8.1.RC1" behind "latest"
    return resolved if resolved != "latest" else "unknown"


def _candidates(
    explicit: Path | str | None, environ: Mapping[str, str], roots: Iterable[Path]
) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    if explicit:
        found.append(("explicit path", Path(explicit)))
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if environ.get(var):
            found.append((f"${var}", Path(environ[var])))
    found += [("default", root) for root in roots]
    return found


def find_toolkit(
    explicit: Path | str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    roots: Iterable[Path] | None = None,
) -> Toolkit:
    """The first CANN 8.x toolkit found, or BackendError saying where it looked."""
    environ = os.environ if environ is None else environ
    roots = DEFAULT_ROOTS if roots is None else roots
    looked: list[str] = []
    for origin, home in _candidates(explicit, environ, roots):
        looked.append(f"{home} ({origin})")
        if not home.is_dir():
            continue
        cmake_dir = _cmake_dir(home)
        if cmake_dir is None:
            if _is_9x(home):
                raise BackendError(
                    f"CANN 9.x layout not supported yet: {home} has bisheng but no ascendc.cmake "
                    f"(looked in {', '.join(ASCENDC_CMAKE_DIRS)}); install a CANN 8.x toolkit or "
                    "point ASCEND_HOME_PATH at one"
                )
            continue
        return Toolkit(
            home=home, cmake_dir=cmake_dir, set_env=_set_env(home), version=_version(home)
        )
    raise BackendError(
        "CANN toolkit not found: set ASCEND_HOME_PATH or source <toolkit>/set_env.sh "
        f"(looked in: {'; '.join(looked)}; a toolkit has ascendc.cmake under one of "
        f"{', '.join(ASCENDC_CMAKE_DIRS)})"
    )
