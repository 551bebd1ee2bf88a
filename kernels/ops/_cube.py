"""TCubeTiling, the Matmul high-level API's tiling struct, as the host packs it."""

from __future__ import annotations

from collections.abc import Mapping

from tilewise.kernels.ops._base import StructField

#: CANN 8.x field order: 50 int32 (200 bytes). The layout fields after dbL0C serve batched and
#: attention matmuls; plain matmuls leave them zero, but they must be there so that whatever
#: follows TCubeTiling in an op's tiling struct sits where the device expects it.
CUBE_FIELDS: tuple[str, ...] = (
    "usedCoreNum", "M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN", "singleCoreK",
    "baseM", "baseN", "baseK", "depthA1", "depthB1", "stepM", "stepN", "isBias",
    "transLength", "iterateOrder", "shareMode", "shareL1Size", "shareL0CSize", "shareUbSize",
    "batchM", "batchN", "singleBatchM", "singleBatchN", "stepKa", "stepKb",
    "depthAL1CacheUB", "depthBL1CacheUB", "dbL0A", "dbL0B", "dbL0C",
    "ALayoutInfoB", "ALayoutInfoS", "ALayoutInfoN", "ALayoutInfoG", "ALayoutInfoD",
    "BLayoutInfoB", "BLayoutInfoS", "BLayoutInfoN", "BLayoutInfoG", "BLayoutInfoD",
    "CLayoutInfoB", "CLayoutInfoS1", "CLayoutInfoN", "CLayoutInfoG", "CLayoutInfoS2",
    "BatchNum", "reserved",
)  # fmt: skip


def cube_struct(prefix: str, values: Mapping[str, int]) -> tuple[StructField, ...]:
    """All 50 fields in order, ``prefix.name``; fields not given are zero."""
    unknown = set(values) - set(CUBE_FIELDS)
    if unknown:
        raise ValueError(f"not TCubeTiling fields: {', '.join(sorted(unknown))}")
    return tuple(
        StructField(f"{prefix}.{name}", "i", int(values.get(name, 0))) for name in CUBE_FIELDS
    )
