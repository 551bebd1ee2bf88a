"""Shared pieces of the ops built on the Matmul high-level API with a vector epilogue.

The TCubeTiling fields a developer sets by hand are the same for every op built on the Matmul
high-level API: the base block, the L1 steps and depths, L0C double buffering and the iteration
order, plus the epilogue's UB rows. These helpers give their domains, the L1/L0 buffers one
Matmul object allocates, the rules of the vendor table, the TCubeTiling values (packed by
``tilewise.kernels.ops._cube.cube_struct``), the MultiCoreMatmulTiling-like starting block and the
epilogue fit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping
from functools import lru_cache

from tilewise.kernels.ops._base import (
    Bound,
    Buffer,
    Carry,
    OpSpec,
    Tunable,
    ceil_div,
    itemsize,
)
from tilewise.kernels.ops._memo import kept_of
from tilewise.kernels.targets import TargetProfile
from tilewise.types import DTYPE_BYTES, Shape, Tiling

BASE_MN = (16, 32, 48, 64, 96, 128, 192, 256)
BASE_K = (8, 16, 32, 64, 128, 256)
CORE_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
#: The base block (baseM, baseN, baseK) the vendor's tiling starts from.
VENDOR_BASE = (128, 256, 64)
_SPLITS_DOWN = tuple(sorted(CORE_SPLITS, reverse=True))
#: L0A/L0B double buffering, as the vendor tiling sets it.
DB_L0AB = 2
EPI_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_EPI_ROWS_DOWN = tuple(sorted(EPI_ROWS, reverse=True))


def c0(dtype: str) -> int:
    """Elements of the cube's K granule: 32 B."""
    return 32 // itemsize(dtype)


@lru_cache(maxsize=4096)
def single_core(extent: int, cores: int) -> tuple[int, ...]:
    """Per-core extents of the core splits that fit ``cores``, multiples of 16, ascending."""
    return tuple(single for single, _ in _pieces(-(-extent // 16), cores)[0])


@lru_cache(maxsize=4096)
def _pieces(blocks: int, cores: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """The core splits of an extent of ``blocks`` blocks of 16 elements, all that a split
    depends on: over ``s`` cores it gives each core ``16 * ceil(blocks / s)`` elements and
    takes ``ceil(blocks / ceil(blocks / s))`` cores, as the extent itself split would.

    Returns (per-core extent, cores it takes) of each of ``single_core``, in ascending order of
    the extent, and per core count ``c`` up to ``cores`` the index of the first of them taking
    at most ``c`` (``len`` of them for 0). The cores taken fall strictly along the pieces, so
    that one is also the piece taking the most cores within ``c``. A split of ``s`` cores takes
    at most ``s``, so every piece fits ``cores``."""
    # One pass: the per-core extent never grows with the split, so the splits from the largest
    # down give the extents in ascending order, repeats side by side. -(-x // s) is
    # ceil(x / s).
    pieces = []
    last = 0
    for s in _SPLITS_DOWN:
        if s > cores:
            continue
        per_core = -(-blocks // s)
        if per_core != last:
            last = per_core
            pieces.append((16 * per_core, -(-blocks // per_core)))
    first_within = []
    i = len(pieces)
    for c in range(cores + 1):
        while i and pieces[i - 1][1] <= c:
            i -= 1
        first_within.append(i)
    return tuple(pieces), tuple(first_within)


def default_split(m: int, n: int, cores: int) -> tuple[int, int]:
    """(singleCoreM, singleCoreN) as MultiCoreMatmulTiling would pick them with ``cores`` tiles
    at most (its SetDim: a MIX kernel's vector cores): the split into the most tiles, then the
    least work per tile, then the squarest block (the first such in the order of
    ``single_core``)."""
    rows = _pieces(-(-m // 16), cores)[0]
    columns, first_within = _pieces(-(-n // 16), cores)
    best_used = best_size = best_m = best_n = 0
    for sm, used_m in rows:
        # Of the columns beside sm, the one taking the most cores that fit can win alone (any
        # other gives fewer cores in all).
        sn, used_n = columns[first_within[cores // used_m]]
        used = used_m * used_n
        if used < best_used:
            continue
        size = sm * sn + abs(sm - sn)
        if used > best_used or size < best_size:
            best_m, best_n, best_used, best_size = sm, sn, used, size
    return best_m, best_n


def cube_tunables(dtype: str, *, m: Bound, n: Bound, k: tuple[str, ...]) -> tuple[Tunable, ...]:
    """The Matmul tunables. A core's C block is ``m`` × ``n`` at any shape (a tunable such as
    singleCoreM, or an extent) and the reduction runs over the extent ``k``: carried to another
    shape, the base block keeps within them (``cube_rules``), and the epilogue within the base
    block."""

    def cap(*bounds: Bound) -> Carry:
        return Carry("cap", bounds=bounds)

    return (
        Tunable("baseM", BASE_MN, "rows of the cube's base block (L0A/L0C)", carry=cap(m)),
        Tunable("baseN", BASE_MN, "columns of the cube's base block (L0B/L0C)", carry=cap(n)),
        Tunable(
            "baseK", BASE_K, "depth of one cube step", carry=cap(Bound(extent=k, align=c0(dtype)))
        ),
        Tunable("stepM", (1, 2, 4), "A base blocks along M held in L1"),
        Tunable("stepN", (1, 2, 4), "B base blocks along N held in L1"),
        Tunable("depthA1", (1, 2, 4, 8), "A base blocks in L1 (stepM × stepKa)"),
        Tunable("depthB1", (1, 2, 4, 8), "B base blocks in L1 (stepN × stepKb)"),
        Tunable("dbL0C", (1, 2), "L0C double buffering"),
        Tunable("iterateOrder", (0, 1), "0: walk M first, 1: walk N first"),
        Tunable("epiRows", EPI_ROWS, "C rows per epilogue pass", carry=cap(Bound("baseM"))),
    )


def mix_cores(tiles: int, target: TargetProfile) -> tuple[int, int]:
    """BlockWork's ``cores`` and ``cube_share`` for a MIX launch of ``tiles`` (a tile per vector
    block): the tiles run at once on the vector cores, and each AI core's cube serves its vector
    blocks in turn (two tiles on a 910B, one where there is a single tile)."""
    return target.vector_cores, min(tiles, target.vector_per_cube)


def split_tunable(name: str, extent: tuple[str, ...], size: int, cores: int, doc: str) -> Tunable:
    """A per-core extent (``single_core``) of ``extent`` (of ``size`` at this shape), carried
    to another shape as its number of pieces."""
    return Tunable(name, single_core(size, cores), doc, carry=Carry("split", extent, 16))


def matmul_buffers(tiling: Tiling, dtype: str, prefix: str = "") -> list[Buffer]:
    """What one Matmul object's Init takes: A/B tiles in L1, ping-pong L0A/L0B, L0C blocks."""
    size, bm, bn, bk = itemsize(dtype), tiling["baseM"], tiling["baseN"], tiling["baseK"]
    plan = [
        Buffer(f"{prefix}A1", "l1", tiling["depthA1"] * bm * bk * size),
        Buffer(f"{prefix}B1", "l1", tiling["depthB1"] * bn * bk * size),
    ]
    plan += [Buffer(f"{prefix}A2[{i}]", "l0a", bm * bk * size) for i in range(DB_L0AB)]
    plan += [Buffer(f"{prefix}B2[{i}]", "l0b", bn * bk * size) for i in range(DB_L0AB)]
    plan += [Buffer(f"{prefix}CO1[{i}]", "l0c", bm * bn * 4) for i in range(tiling["dbL0C"])]
    return plan


def epilogue_fits(rows: int, base_m: int) -> bool:
    """Whether an epilogue pass of ``rows`` rows fits the C block of ``base_m`` rows."""
    return rows <= base_m


def cube_rules(tiling: Tiling, dtype: str, *, single_m: int, single_n: int, k: int) -> list[str]:
    reasons = []
    # A Tiling's own dict, read in C, and the helpers inline: the runtime checks a carried
    # tiling per first answer.
    t: Mapping[str, int] = tiling._index if type(tiling) is Tiling else tiling
    bm, bn, bk, granule = t["baseM"], t["baseN"], t["baseK"], 32 // DTYPE_BYTES[dtype]  # c0
    # What Matmul::Init refuses (TCubeTiling's rules) is refused here, before a launch: a value
    # outside the tunables' domains (a hand-written or tampered table) would otherwise pass the
    # checks and end the process that launches it in-process.
    if t["dbL0C"] not in (1, 2):
        reasons.append(f"dbL0C {t['dbL0C']} must be 1 or 2")
    if t["iterateOrder"] not in (0, 1):
        reasons.append(f"iterateOrder {t['iterateOrder']} must be 0 or 1")
    if t["stepM"] < 1 or t["stepN"] < 1:
        reasons.append(f"stepM {t['stepM']} and stepN {t['stepN']} must be positive")
    if bm % 16 or bn % 16:
        reasons.append(f"baseM {bm} and baseN {bn} must be multiples of 16")
    if bk % granule:
        reasons.append(f"baseK {bk} must be a multiple of {granule} for {dtype}")
    if t["depthA1"] % t["stepM"]:
        reasons.append(f"depthA1 {t['depthA1']} is not a multiple of stepM")
    if t["depthB1"] % t["stepN"]:
        reasons.append(f"depthB1 {t['depthB1']} is not a multiple of stepN")
    if bm > -(-single_m // 16) * 16 or bn > -(-single_n // 16) * 16:  # round_up, inline
        reasons.append("base block larger than the single-core block")
    if bk > -(-k // granule) * granule:
        reasons.append(f"baseK {bk} larger than K={k}")
    if not epilogue_fits(t["epiRows"], bm):
        reasons.append(f"epiRows {t['epiRows']} exceeds baseM {bm}")
    return reasons


#: What default_base sets besides the base block, and every field of default_matmul's tiling
#: in name order (a Tiling's own order, so that a default is built without a sort).
_BASE_REST = {
    "stepM": 1,
    "stepN": 1,
    "depthA1": 2,
    "depthB1": 2,
    "dbL0C": 1,
    "iterateOrder": 0,
    "epiRows": 1,
}
#: Default tilings kept per op, dtype and target (see default_matmul): beyond these, computed.
MAX_KEPT_DEFAULTS = 1 << 16
_DEFAULT_FIELDS = tuple(
    sorted(("baseM", "baseN", "baseK", *_BASE_REST, "singleCoreM", "singleCoreN"))
)


def _largest(domain: tuple[int, ...], cap: int) -> int:
    """The last value of ``domain`` (ascending) within ``cap``, else its first."""
    i = bisect_right(domain, cap)
    return domain[i - 1] if i else domain[0]


def default_base(
    single_m: int, single_n: int, k: int, dtype: str, target: TargetProfile, objects: int = 1
) -> dict[str, int]:
    """The vendor's (128, 256, 64) start, shrunk until ``objects`` Matmul objects fit L0A/L0B."""
    granule = c0(dtype)
    start_m, start_n, start_k = VENDOR_BASE
    # round_up inline (-(-x // m) * m): a default heuristic runs per first-time shape.
    bm = _largest(BASE_MN, min(start_m, -(-single_m // 16) * 16))
    bn = _largest(BASE_MN, min(start_n, -(-single_n // 16) * 16))
    bk = _largest(BASE_K, min(start_k, -(-k // granule) * granule))
    # Bytes of L0A / L0B per row of a base block: the objects' ping-pong buffers.
    per_row = objects * DB_L0AB * itemsize(dtype)
    l0a, l0b = target.l0a, target.l0b
    while per_row * bn * bk > l0b or per_row * bm * bk > l0a:
        if bk > max(granule, 32):
            bk //= 2
        elif per_row * bn * bk > l0b:
            bn = _largest(BASE_MN, bn - 16)
        else:
            bm = _largest(BASE_MN, bm - 16)
    return {"baseM": bm, "baseN": bn, "baseK": bk, **_BASE_REST}


def fit_epilogue(
    tiling: Tiling, valid: Callable[[Tiling], bool], extra: tuple[dict[str, int], ...] = ({},)
) -> Tiling:
    """The largest epiRows (over the ``extra`` variants, in order) that makes ``tiling`` valid;
    when none does, halve the larger of baseN and baseM and try again. ``valid`` holds the op
    to :func:`cube_rules`, so a candidate whose epilogue exceeds its base block
    (:func:`epilogue_fits`) is invalid without asking it."""
    while True:
        for variant in extra:
            base_m = variant.get("baseM", tiling["baseM"])
            for rows in _EPI_ROWS_DOWN:
                if not epilogue_fits(rows, base_m):
                    continue
                candidate = tiling.replace(**variant, epiRows=rows)
                if valid(candidate):
                    return candidate
        bm, bn = tiling["baseM"], tiling["baseN"]
        if max(bm, bn) <= BASE_MN[0]:
            return tiling
        if bn >= bm:
            tiling = tiling.replace(baseN=max(v for v in BASE_MN if v <= bn // 2))
        else:
            tiling = tiling.replace(baseM=max(v for v in BASE_MN if v <= bm // 2))


def default_matmul(
    spec: OpSpec,
    shape: Shape,
    dims: tuple[str, str, str],
    dtype: str,
    target: TargetProfile,
    objects: int = 1,
) -> Tiling:
    """The default tiling of an op of ``objects`` Matmul objects computing the m × n × k
    product its ``dims`` name, split over the cores by rows and columns (singleCoreM,
    singleCoreN): the split of :func:`default_split`, the base block of :func:`default_base`,
    then :func:`fit_epilogue` with the op's :meth:`~OpSpec.valid` at ``shape``.

    What the fit changes (epiRows, baseM, baseN) is kept per base block, for ``spec``,
    ``dtype`` and ``target``: a new shape's default costs the split and the base block, the fit
    once per base block (:func:`warm_default_fits` fits them all ahead). That is exact for the
    ops that use this: every candidate the fit tries keeps the start's split and baseK and a
    base block no larger than the start's, so the checks of ``valid`` that read the shape or
    the split (baseK within K and the base block within a core's block, which default_base
    keeps to; the cores the split takes, which default_split keeps to) pass for each of them,
    and the rest (the other rules of :func:`cube_rules`, the buffers) read the base block's
    fields alone.

    So the whole tiling is a function of the split and of K capped at the vendor's baseK (all
    that default_base reads of K): it is kept per (singleCoreM, singleCoreN, capped K), up to
    :data:`MAX_KEPT_DEFAULTS` of them, and a shape whose split was met before costs the split
    alone. A split met first costs a copy of the tiling's other fields, which default_base
    reads of the split only capped at the vendor's base block (:func:`_template`)."""
    m, n, k = shape[dims[0]], shape[dims[1]], shape[dims[2]]
    sm, sn = default_split(m, n, target.vector_cores)
    granule = c0(dtype)
    key = (sm, sn, min(VENDOR_BASE[2], -(-k // granule) * granule))
    kept: dict[tuple[int, int, int], Tiling] = kept_of(spec, f"{dtype} defaults", target, dict)
    found = kept.get(key)
    if found is not None:
        return found
    values = _template(spec, shape, dtype, target, objects, sm, sn, key[2]).copy()
    values["singleCoreM"], values["singleCoreN"] = sm, sn
    tiling = Tiling.of_sorted(values)
    if len(kept) < MAX_KEPT_DEFAULTS:
        kept[key] = tiling
    return tiling


def _template(
    spec: OpSpec,
    shape: Shape,
    dtype: str,
    target: TargetProfile,
    objects: int,
    sm: int,
    sn: int,
    k: int,
) -> dict[str, int]:
    """Every field of :func:`default_matmul`'s tiling for the split (sm, sn) of ``shape`` and K
    capped at the vendor's baseK (``k``), in name order, the split's two zero: kept per the
    split capped at the vendor's (baseM, baseN), beyond which default_base does not read it (at
    most 8 x 16 capped splits of multiples of 16 per capped K)."""
    templates: dict[tuple[int, int, int], dict[str, int]] = kept_of(
        spec, f"{dtype} default templates", target, dict
    )
    capped = (min(sm, VENDOR_BASE[0]), min(sn, VENDOR_BASE[1]), k)
    template = templates.get(capped)
    if template is None:
        base = default_base(sm, sn, k, dtype, target, objects)
        values = {**base, **_fitted(spec, shape, dtype, target, base, sm, sn)}
        values["singleCoreM"] = values["singleCoreN"] = 0
        template = templates[capped] = {name: values[name] for name in _DEFAULT_FIELDS}
    return template


def warm_default_fits(
    spec: OpSpec, dims: tuple[str, str, str], dtype: str, target: TargetProfile, objects: int = 1
) -> None:
    """Fill what :func:`default_matmul` keeps for any shape: the tiling of every capped split
    and K (:func:`_template`), and so the fit of every base block default_base can start from.
    Each is made at the shape whose one core's block is the capped split (a split of one core,
    where every check that reads the shape passes as at any shape default_matmul meets)."""
    warmed: list[bool] = kept_of(spec, f"{dtype} default fits warmed", target, list)
    if warmed:
        return
    start_m, start_n, start_k = VENDOR_BASE
    granule = c0(dtype)
    for sm in range(16, start_m + 1, 16):
        for sn in range(16, start_n + 1, 16):
            for k in range(granule, start_k + 1, granule):
                shape = Shape(dict(zip(dims, (sm, sn, k), strict=True)))
                _template(spec, shape, dtype, target, objects, sm, sn, k)
    warmed.append(True)


def _fitted(
    spec: OpSpec,
    shape: Shape,
    dtype: str,
    target: TargetProfile,
    base: dict[str, int],
    sm: int,
    sn: int,
) -> dict[str, int]:
    """The fields :func:`fit_epilogue` sets for ``base`` at the split (sm, sn) of ``shape``,
    kept per base block (see :func:`default_matmul`)."""
    fits: dict[tuple[int, ...], dict[str, int]] = kept_of(
        spec, f"{dtype} default fit", target, dict
    )
    key = tuple(base.values())
    fitted = fits.get(key)
    if fitted is None:
        start = Tiling.of_ints({**base, "singleCoreM": sm, "singleCoreN": sn})
        done = fit_epilogue(start, lambda t: spec.valid(t, shape, dtype, target))
        # At most one per base block of the domains (a few hundred): no bound needed.
        fits[key] = {name: done[name] for name in ("baseM", "baseN", "epiRows")}
        fitted = fits[key]
    return fitted


def cube_values(
    tiling: Tiling, *, m: int, n: int, k: int, single_m: int, single_n: int, used: int
) -> dict[str, int]:
    """The TCubeTiling fields a plain matmul sets (the rest stay zero)."""
    return {
        "usedCoreNum": used,
        "M": m,
        "N": n,
        "Ka": k,
        "Kb": k,
        "singleCoreM": single_m,
        "singleCoreN": single_n,
        "singleCoreK": k,
        "baseM": tiling["baseM"],
        "baseN": tiling["baseN"],
        "baseK": tiling["baseK"],
        "depthA1": tiling["depthA1"],
        "depthB1": tiling["depthB1"],
        "stepM": tiling["stepM"],
        "stepN": tiling["stepN"],
        "iterateOrder": tiling["iterateOrder"],
        "batchM": 1,
        "batchN": 1,
        "singleBatchM": 1,
        "singleBatchN": 1,
        "stepKa": max(1, tiling["depthA1"] // tiling["stepM"]),
        "stepKb": max(1, tiling["depthB1"] // tiling["stepN"]),
        "dbL0A": DB_L0AB,
        "dbL0B": DB_L0AB,
        "dbL0C": tiling["dbL0C"],
    }


def matmul_gm_reads(
    tiling: Tiling, *, single_m: int, single_n: int, k: int
) -> tuple[int, int, int, int]:
    """(A reads, B reads, M blocks, N blocks) of one core's walk, with linear_add_gelu's L1
    reuse rule: a matrix is read once when the tiles the walk revisits fit its L1 depth."""
    mb, nb = ceil_div(single_m, tiling["baseM"]), ceil_div(single_n, tiling["baseN"])
    kt = ceil_div(k, tiling["baseK"])
    if tiling["iterateOrder"] == 0:
        a_reads = 1 if tiling["depthA1"] >= mb * kt else nb
        b_reads = 1 if tiling["depthB1"] >= kt else mb
    else:
        a_reads = 1 if tiling["depthA1"] >= kt else nb
        b_reads = 1 if tiling["depthB1"] >= nb * kt else mb
    return a_reads, b_reads, mb, nb
