""":func:`load_ops`: the :class:`Ops` of a tiling table, wherever the table is."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tilewise.errors import InputError
from tilewise.launch._device import open_device
from tilewise.launch._ops import TARGET, Ops
from tilewise.runtime import TilingTable
from tilewise.settings import Settings, get_settings

if TYPE_CHECKING:
    import httpx


def load_ops(
    source: TilingTable | str | os.PathLike[str] | None = None,
    *,
    target: str = TARGET,
    device: int = 0,
    settings: Settings | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Ops:
    """The tuned kernels of the table ``source``, callable on numpy arrays (see :class:`Ops`).

    ``source`` is a :class:`~tilewise.runtime.TilingTable`; a service URL (``http://`` or
    ``https://``: its ``/v1/tables``); a database URL (``sqlite:///...``,
    ``postgresql://...``); a JSON table file (``tilewise export --format json``); or None, the
    database of the settings (``TILEWISE_DB_URL``). The tilings of ``target`` are used: the
    default ``cpu-twin`` runs the kernels on this host's cores; an Ascend target (e.g.
    ``ascend910b2``) runs them on NPU ``device`` through CANN's ACL, built with the toolkit of
    ``ASCEND_HOME_PATH`` (tested against a fake toolkit only, never on an NPU).
    ``settings`` also names the build cache (shared with the tuner); ``transport`` is handed
    to httpx for a service URL.

    Raises:
        InputError: an unknown target or a bad device id; the file cannot be read.
        BackendError: the target's toolkit is missing (an Ascend target without CANN: the
            message names ASCEND_HOME_PATH and set_env.sh), or the host has no NPU. Checked
            before the table is read.
        StoreError, SchemaError: the service or the database cannot be used.
        TableFormatError: the file or the service's answer is not a valid table.
    """
    settings = settings or get_settings()
    opened = open_device(target, settings=settings, device=device)
    name = opened.target.name
    table: TilingTable
    if isinstance(source, TilingTable):
        table = source
    elif source is None:
        table = TilingTable.from_db(settings.db_url, target=name)
    elif not isinstance(source, str | os.PathLike):
        raise InputError(
            "load_ops takes a TilingTable, a service or database URL, a table file or None, "
            f"got {type(source).__name__}"
        )
    else:
        text = os.fspath(source)
        if text.startswith(("http://", "https://")):
            table = TilingTable.from_url(text, target=name, transport=transport)
        elif "://" in text:
            table = TilingTable.from_db(text, target=name)
        else:
            table = TilingTable.from_file(text)
    return Ops.with_device(table, opened)
