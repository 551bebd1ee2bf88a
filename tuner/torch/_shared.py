"""The :class:`~tilewise.launch.Ops` every ``torch.ops.tilewise`` call runs through: one for CPU
tensors (the cpu-twin) and one for NPU tensors (an Ascend target)."""

from __future__ import annotations

import logging
import os
import sys
import threading

from tilewise.errors import InputError
from tilewise.forks import renew_in_child
from tilewise.kernels.targets import get_target
from tilewise.launch import Ops, load_ops
from tilewise.runtime import TilingTable
from tilewise.settings import Settings, get_settings

_log = logging.getLogger("tilewise.torch")

#: The device type of NPU tensors: torch_npu renames PyTorch's PrivateUse1 backend to it.
NPU = "npu"

_lock = threading.Lock()  # held while the first call opens the database
renew_in_child(sys.modules[__name__], "_lock")
_ops: dict[str, Ops] = {}  # by device type: "cpu", "npu"


def use_table(
    source: TilingTable | str | os.PathLike[str] | None = None,
    *,
    target: str = "cpu-twin",
    settings: Settings | None = None,
) -> Ops:
    """Run the torch ops with the tilings of ``source`` from now on, in every thread; returns
    the :class:`~tilewise.launch.Ops` they go through (its ``last_choice`` says what ran).

    ``source`` and ``settings`` are :func:`tilewise.load_ops`'s: a table, a JSON table file, a
    service or database URL, or None for the database of the settings. ``target`` says which
    tensors: ``cpu-twin`` (the default) for CPU tensors; an Ascend target such as
    ``ascend910b2`` for NPU tensors (torch_npu), whose kernels are built with CANN and launched
    on the tensors' device (tested against a fake CANN toolkit only, never on an NPU).

    Raises:
        InputError: an unknown target.
        BackendError: an Ascend target without CANN (the message names ASCEND_HOME_PATH and
            set_env.sh) or without an NPU.
    """
    device = "cpu" if get_target(target).backend == "cpu-twin" else NPU
    ops = load_ops(source, target=target, settings=settings)
    with _lock:
        _ops[device] = ops
    return ops


def current_ops(device: str = "cpu") -> Ops:
    """The :class:`~tilewise.launch.Ops` of the last :func:`use_table` for tensors of device
    type ``device``. For CPU tensors, before any: that of the settings' database, opened at
    the first call (importing opens nothing).

    Raises:
        InputError: NPU tensors before a :func:`use_table` with an Ascend target.
    """
    with _lock:
        found = _ops.get(device)
        if found is None:
            if device != "cpu":
                raise InputError(
                    f"{device} tensors run the kernels of an Ascend target: call "
                    "tilewise.torch.use_table(source, target='ascend910b2') (your SoC) first"
                )
            found = _ops[device] = _default_ops()
        return found


def _default_ops() -> Ops:
    """The Ops of the settings' database; of an empty table (default tilings, for the rest of
    the process), with a warning, when that database is a SQLite file nothing has created
    yet: a model runs before any tune, as it would without tilewise."""
    from tilewise.store import is_missing_file

    settings = get_settings()
    if not is_missing_file(settings.db_url):
        return load_ops(settings=settings)
    _log.warning(
        "no tilings database yet (%s): the tilewise ops of this process run their default "
        "tilings; after a tune, tilewise.torch.use_table() reads its database",
        settings.db_url,
    )
    return load_ops(TilingTable([]), settings=settings)
