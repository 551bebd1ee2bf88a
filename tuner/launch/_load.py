""":func:`load_ops`: the :class:`Ops` of a tiling table, wherever the table is."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tilewise.launch._ops import TARGET, Ops
from tilewise.runtime import TilingTable
from tilewise.settings import Settings, get_settings

if TYPE_CHECKING:
    import httpx


def load_ops(
    source: TilingTable | str | os.PathLike[str] | None = None,
    *,
    settings: Settings | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Ops:
    """The tuned kernels of the table ``source``, callable on numpy arrays (see :class:`Ops`).

    ``source`` is a :class:`~tilewise.runtime.TilingTable`; a service URL (``http://`` or
    ``https://``: its ``/v1/tables``); a database URL (``sqlite:///...``,
    ``postgresql://...``); a JSON table file (``tilewise export --format json``); or None, the
    database of the settings (``TILEWISE_DB_URL``). Only ``cpu-twin`` entries are loaded.
    ``settings`` also names the build cache (shared with the tuner); ``transport`` is handed
    to httpx for a service URL.

    Raises:
        StoreError, SchemaError: the service or the database cannot be used.
        TableFormatError: the file or the service's answer is not a valid table.
        InputError: the file cannot be read.
    """
    settings = settings or get_settings()
    table: TilingTable
    if isinstance(source, TilingTable):
        table = source
    elif source is None:
        table = TilingTable.from_db(settings.db_url, target=TARGET)
    else:
        text = os.fspath(source)
        if text.startswith(("http://", "https://")):
            table = TilingTable.from_url(text, target=TARGET, transport=transport)
        elif "://" in text:
            table = TilingTable.from_db(text, target=TARGET)
        else:
            table = TilingTable.from_file(text)
    return Ops(table, settings=settings)
