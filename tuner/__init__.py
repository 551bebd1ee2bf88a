"""tilewise: autotuning of tiling parameters for fused Ascend C kernels.

The names a program that uses tuned tilings needs are here::

    import tilewise
    table = tilewise.TilingTable.from_file("tilings.json")
    try:
        answer = table.lookup("linear_add_gelu", target="cpu-twin", dtype="float32",
                              shape={"M": 1000, "N": 4096, "K": 1024})
    except tilewise.InputError as exc:  # an unknown op, dtype or target, a bad shape
        ...
    ops = tilewise.load_ops(table)  # the tuned kernels, run in this process on numpy arrays
    y = ops.linear_add_gelu(x, w, b)

Every error tilewise raises is a :class:`TilewiseError`. ``import tilewise`` stays light: the
runtime and the launcher (numpy, the op specs) are imported when one of its names is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilewise.errors import (
    BackendError,
    ConfigError,
    InputError,
    SchemaError,
    StoreError,
    TilewiseError,
)

if TYPE_CHECKING:
    from tilewise.export import TableFormatError
    from tilewise.launch import load_ops
    from tilewise.runtime import Answer, TilingTable

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "BackendError",
    "ConfigError",
    "InputError",
    "SchemaError",
    "StoreError",
    "TableFormatError",
    "TilewiseError",
    "TilingTable",
    "__version__",
    "load_ops",
]

_LAZY = {
    "Answer": "tilewise.runtime",
    "TilingTable": "tilewise.runtime",
    "TableFormatError": "tilewise.export",
    "load_ops": "tilewise.launch",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tilewise' has no attribute {name!r}")
