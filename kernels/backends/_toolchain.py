"""The toolchain a backend measures with on this host (:class:`tilewise.types.Toolchain`).

Lookups, exports and the runtime serve only the tilings of the current toolchain of their
target; :func:`current_toolchain` tells it without making a backend (no runner, no build).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from functools import lru_cache

from tilewise.errors import BackendError, ConfigError, InputError
from tilewise.kernels.targets import TargetProfile, get_target
from tilewise.settings import get_settings
from tilewise.types import Toolchain, canonical_json

#: Profile fields that are names, not limits: they do not change a timing.
_NAMES = ("name", "backend", "source")


def profile_digest(target: TargetProfile) -> str:
    """A short hash of the target's chip limits (core counts, memory sizes, clock, rates)."""
    sizes = {k: v for k, v in target.to_dict().items() if k not in _NAMES}
    return hashlib.sha256(canonical_json(sizes).encode()).hexdigest()[:12]


def twin_toolchain(compiler: str, target: TargetProfile) -> Toolchain:
    from tilewise.kernels.backends._cpu_twin import twin_headers_digest

    headers = f"twin {twin_headers_digest()[:12]}"
    return Toolchain("cpu-twin", compiler, headers, profile_digest(target))


def ascend_toolchain(cann_version: str, target: TargetProfile) -> Toolchain:
    # The Ascend C compiler ships with CANN: its version is the toolkit's.
    cann = f"CANN {cann_version}"
    return Toolchain("ascend", cann, cann, profile_digest(target))


def current_toolchain(target: TargetProfile | str) -> Toolchain | None:
    """The toolchain this host would tune ``target`` with; None when it has none (no compiler
    for the twin, no CANN toolkit for an Ascend SoC): then nothing can be judged stale here."""
    profile = get_target(target) if isinstance(target, str) else target
    # Cached per compiler setting and toolkit location: a lookup must not probe each time.
    toolkit = tuple(os.environ.get(name) for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"))
    return _current(profile, get_settings().compiler, toolkit)


@lru_cache(maxsize=32)
def _current(
    target: TargetProfile, compiler_setting: str, _toolkit: tuple[str | None, ...]
) -> Toolchain | None:
    if target.backend == "cpu-twin":
        from tilewise.kernels.backends._compiler import find_compiler

        try:
            compiler = find_compiler(compiler_setting)
        except ConfigError:
            return None
        return twin_toolchain(f"{compiler.kind} {compiler.version}", target)
    from tilewise.kernels.backends._ascend.toolkit import find_toolkit

    try:
        toolkit = find_toolkit(None)
    except BackendError:
        return None
    return ascend_toolchain(toolkit.version, target)


def current_toolchain_id(target: TargetProfile | str) -> str | None:
    """The id of :func:`current_toolchain`, None when not known here."""
    found = current_toolchain(target)
    return None if found is None else found.id


def current_toolchain_ids(targets: Iterable[str]) -> dict[str, str | None]:
    """:func:`current_toolchain_id` of each target name that names a target this code knows
    (the others are left out: not known here)."""
    out: dict[str, str | None] = {}
    for name in set(targets):
        try:
            out[name] = current_toolchain_id(name)
        except InputError:
            continue
    return out
