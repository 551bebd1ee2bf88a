// linear_add_gelu's TilingFunc: the tuned table first, the op's default heuristic otherwise.
// The rules and the heuristic are tilewise's (kernels/ops/linear_add_gelu/spec.py and
// kernels/ops/_matmul_common.py) written in C++; the tests compare both with the Python ones.
#include "linear_add_gelu_tiling.h"

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

// Generated at configure time by `tilewise export linear_add_gelu --format header`.
#include "tilewise_linear_add_gelu.h"

static_assert(TILEWISE_LINEAR_ADD_GELU_FIELDS == 12, "the table's tiling fields are the op's 12 tunables");
static_assert(TILEWISE_LINEAR_ADD_GELU_DIMS == 3, "the table's shapes are (M, N, K)");

namespace lag_host {
namespace {

constexpr int64_t kKiB = 1024;
// tilewise.kernels.targets: UB kept for API temporaries, and what a MIX kernel loses besides.
constexpr int64_t kUbReserved = 8 * kKiB;
constexpr int64_t kUbMixReserved = 256;

constexpr int32_t kBaseMN[] = {16, 32, 48, 64, 96, 128, 192, 256};
constexpr int32_t kBaseK[] = {8, 16, 32, 64, 128, 256};
constexpr int32_t kCoreSplits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48};
constexpr int32_t kEpiRows[] = {256, 128, 64, 32, 16, 8, 4, 2, 1};  // largest first
constexpr int32_t kDbL0AB = 2;                                        // as the vendor tiling sets it

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
int64_t Align32(int64_t bytes) { return RoundUp(bytes, 32); }

// The largest value of the domain not above cap (the domain's least when none is).
template <size_t N>
int32_t Largest(const int32_t (&domain)[N], int64_t cap)
{
    int32_t best = domain[0];
    for (int32_t v : domain) {
        if (v <= cap) best = v;
    }
    return best;
}

// Per-core extents of the core splits that fit the platform, multiples of 16, ascending.
std::vector<int64_t> SingleCoreExtents(int64_t extent, int64_t cores)
{
    std::vector<int64_t> out;
    for (int32_t s : kCoreSplits) {
        if (s <= cores) out.push_back(RoundUp(CeilDiv(extent, s), 16));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void Add(std::string& reasons, const std::string& reason)
{
    if (!reasons.empty()) reasons += "; ";
    reasons += reason;
}

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

Platform TwinPlatform()
{
    // Ascend910B1 (CANN platform_config/Ascend910B1.ini): 24 cube and 48 vector cores, UB
    // 192 KiB, L1 512 KiB, L0A and L0B 64 KiB, L0C 128 KiB.
    return Platform{24, 48, 192 * kKiB - kUbReserved - kUbMixReserved, 512 * kKiB, 64 * kKiB, 64 * kKiB, 128 * kKiB};
}

const char* SourceName(TilingSource source)
{
    switch (source) {
        case TilingSource::kExact: return "exact";
        case TilingSource::kNearest: return "nearest";
        case TilingSource::kDefault: return "default";
        case TilingSource::kGiven: return "given";
    }
    return "?";
}

uint32_t Tiles(const Tunables& t, int64_t m, int64_t n)
{
    return static_cast<uint32_t>(CeilDiv(m, t.singleCoreM) * CeilDiv(n, t.singleCoreN));
}

uint32_t VectorBlocksPerCore(const Platform& platform)
{
    return static_cast<uint32_t>(std::max<int64_t>(1, platform.vectorCores / platform.cubeCores));
}

uint32_t BlockDim(const Tunables& t, int64_t m, int64_t n, const Platform& platform)
{
    const uint32_t ratio = VectorBlocksPerCore(platform);
    return (Tiles(t, m, n) + ratio - 1) / ratio;
}

std::string CheckTiling(const Tunables& t, int64_t m, int64_t n, int64_t k, int64_t dtypeBytes,
                        const Platform& platform)
{
    for (int32_t v : {t.baseM, t.baseN, t.baseK, t.stepM, t.stepN, t.depthA1, t.depthB1, t.dbL0C, t.epiRows,
                      t.singleCoreM, t.singleCoreN}) {
        if (v <= 0) return "tiling values outside every domain: a field is " + Str(v);
    }
    const int64_t c0 = 32 / dtypeBytes;  // elements of the cube's 32-byte K granule
    const int64_t bm = t.baseM, bn = t.baseN, bk = t.baseK;
    std::string reasons;
    // What Matmul::Init refuses, as the spec's rules say it (cube_rules, in the same order).
    if (t.dbL0C != 1 && t.dbL0C != 2) Add(reasons, "dbL0C " + Str(t.dbL0C) + " must be 1 or 2");
    if (t.iterateOrder != 0 && t.iterateOrder != 1) {
        Add(reasons, "iterateOrder " + Str(t.iterateOrder) + " must be 0 or 1");
    }
    if (bm % 16 || bn % 16) Add(reasons, "baseM " + Str(bm) + " and baseN " + Str(bn) + " must be multiples of 16");
    if (bk % c0) Add(reasons, "baseK " + Str(bk) + " must be a multiple of " + Str(c0));
    if (t.depthA1 % t.stepM) Add(reasons, "depthA1 " + Str(t.depthA1) + " is not a multiple of stepM");
    if (t.depthB1 % t.stepN) Add(reasons, "depthB1 " + Str(t.depthB1) + " is not a multiple of stepN");
    if (bm > RoundUp(t.singleCoreM, 16) || bn > RoundUp(t.singleCoreN, 16)) {
        Add(reasons, "base block larger than the single-core block");
    }
    if (bk > RoundUp(k, c0)) Add(reasons, "baseK " + Str(bk) + " larger than K=" + Str(k));
    if (t.epiRows > bm) Add(reasons, "epiRows " + Str(t.epiRows) + " exceeds baseM " + Str(bm));
    const int64_t used = CeilDiv(m, t.singleCoreM) * CeilDiv(n, t.singleCoreN);
    // A tile per vector core: the Matmul API runs from a MIX launch's vector blocks.
    if (used > platform.vectorCores) {
        Add(reasons, "core split needs " + Str(used) + " tiles, target has " + Str(platform.vectorCores) +
                         " vector cores");
    }
    // What the kernel's Init and its Matmul object allocate (LinearAddGelu.buffers).
    int64_t ub = Align32(bm * bn * 4) + Align32(bn * 4) + 2 * Align32(t.epiRows * bn * dtypeBytes);
    if (dtypeBytes != 4) ub += Align32(bn * dtypeBytes);
    const int64_t l1 = (t.depthA1 * bm + t.depthB1 * bn) * bk * dtypeBytes;
    const int64_t l0a = kDbL0AB * bm * bk * dtypeBytes;
    const int64_t l0b = kDbL0AB * bn * bk * dtypeBytes;
    const int64_t l0c = t.dbL0C * bm * bn * 4;
    const struct {
        const char* name;
        int64_t used, limit;
    } memories[] = {{"UB", ub, platform.ub},
                    {"L1", l1, platform.l1},
                    {"L0A", l0a, platform.l0a},
                    {"L0B", l0b, platform.l0b},
                    {"L0C", l0c, platform.l0c}};
    for (const auto& mem : memories) {
        if (mem.used > mem.limit) {
            Add(reasons,
                std::string(mem.name) + " overflow: needs " + Str(mem.used) + " B, limit " + Str(mem.limit) + " B");
        }
    }
    return reasons;
}

Tunables DefaultTiling(int64_t m, int64_t n, int64_t k, int64_t dtypeBytes, const Platform& platform)
{
    // The core split MultiCoreMatmulTiling would pick (its SetDim counting the vector cores): the
    // most tiles, then the least work per tile, then the squarest block.
    int64_t sm = 0, sn = 0, bestUsed = 0, bestArea = 0;
    for (int64_t cm : SingleCoreExtents(m, platform.vectorCores)) {
        for (int64_t cn : SingleCoreExtents(n, platform.vectorCores)) {
            const int64_t used = CeilDiv(m, cm) * CeilDiv(n, cn);
            const int64_t area = cm * cn + (cm > cn ? cm - cn : cn - cm);
            if (used > platform.vectorCores) continue;
            if (sm == 0 || used > bestUsed || (used == bestUsed && area < bestArea)) {
                sm = cm, sn = cn, bestUsed = used, bestArea = area;
            }
        }
    }
    // The vendor's (128, 256, 64) base block, shrunk until L0A and L0B hold two blocks each.
    const int64_t c0 = 32 / dtypeBytes;
    int64_t bm = Largest(kBaseMN, std::min<int64_t>(128, RoundUp(sm, 16)));
    int64_t bn = Largest(kBaseMN, std::min<int64_t>(256, RoundUp(sn, 16)));
    int64_t bk = Largest(kBaseK, std::min<int64_t>(64, RoundUp(k, c0)));
    auto l0 = [&](int64_t rows) { return kDbL0AB * rows * bk * dtypeBytes; };
    while (l0(bn) > platform.l0b || l0(bm) > platform.l0a) {
        if (bk > std::max<int64_t>(c0, 32)) {
            bk /= 2;
        } else if (l0(bn) > platform.l0b) {
            bn = Largest(kBaseMN, bn - 16);
        } else {
            bm = Largest(kBaseMN, bm - 16);
        }
    }
    Tunables t{};
    t.baseM = static_cast<int32_t>(bm);
    t.baseN = static_cast<int32_t>(bn);
    t.baseK = static_cast<int32_t>(bk);
    t.stepM = 1;
    t.stepN = 1;
    t.depthA1 = 2;
    t.depthB1 = 2;
    t.dbL0C = 1;
    t.iterateOrder = 0;
    t.epiRows = 1;
    t.singleCoreM = static_cast<int32_t>(sm);
    t.singleCoreN = static_cast<int32_t>(sn);
    // The largest epilogue that fits; when none does, halve the larger of baseN and baseM.
    for (;;) {
        for (int32_t rows : kEpiRows) {
            Tunables candidate = t;
            candidate.epiRows = rows;
            if (CheckTiling(candidate, m, n, k, dtypeBytes, platform).empty()) return candidate;
        }
        if (std::max(t.baseM, t.baseN) <= kBaseMN[0]) return t;
        if (t.baseN >= t.baseM) {
            t.baseN = Largest(kBaseMN, t.baseN / 2);
        } else {
            t.baseM = Largest(kBaseMN, t.baseM / 2);
        }
    }
}

TilingDecision ChooseTiling(int64_t m, int64_t n, int64_t k, const Platform& platform, bool useTable)
{
    TilingDecision d{};
    d.tableAnswer = TILEWISE_NOT_FOUND;
    if (useTable) {
        int32_t f[TILEWISE_LINEAR_ADD_GELU_FIELDS];
        d.tableAnswer = tilewise_linear_add_gelu_lookup("cpu-twin", "float32", m, n, k, f);
        if (d.tableAnswer != TILEWISE_NOT_FOUND) {
            Tunables& t = d.tunables;
            t.baseM = f[TILEWISE_LINEAR_ADD_GELU_BASEM];
            t.baseN = f[TILEWISE_LINEAR_ADD_GELU_BASEN];
            t.baseK = f[TILEWISE_LINEAR_ADD_GELU_BASEK];
            t.stepM = f[TILEWISE_LINEAR_ADD_GELU_STEPM];
            t.stepN = f[TILEWISE_LINEAR_ADD_GELU_STEPN];
            t.depthA1 = f[TILEWISE_LINEAR_ADD_GELU_DEPTHA1];
            t.depthB1 = f[TILEWISE_LINEAR_ADD_GELU_DEPTHB1];
            t.dbL0C = f[TILEWISE_LINEAR_ADD_GELU_DBL0C];
            t.iterateOrder = f[TILEWISE_LINEAR_ADD_GELU_ITERATEORDER];
            t.epiRows = f[TILEWISE_LINEAR_ADD_GELU_EPIROWS];
            t.singleCoreM = f[TILEWISE_LINEAR_ADD_GELU_SINGLECOREM];
            t.singleCoreN = f[TILEWISE_LINEAR_ADD_GELU_SINGLECOREN];
            d.tableTunables = t;
            // The header cannot check a neighbour's tiling for a shape it never saw (its comment
            // says so): the TilingFunc checks every tiling it did not tune for this shape.
            const std::string broken = CheckTiling(t, m, n, k, 4, platform);
            if (broken.empty()) {
                d.source = d.tableAnswer == TILEWISE_EXACT ? TilingSource::kExact : TilingSource::kNearest;
                return d;
            }
            d.note = std::string("the table's ") + (d.tableAnswer == TILEWISE_EXACT ? "exact" : "nearest") +
                     " tiling is not valid for this shape (" + broken + ")";
        } else {
            // TILEWISE_NOT_FOUND: no table for cpu-twin float32, or its rule keeps the default
            // here (a cell of its grid, the nearest tuned shape's own default, a portfolio's).
            d.note = "the table says: use your default for this shape";
        }
    } else {
        d.note = "the table was not asked";
    }
    d.tunables = DefaultTiling(m, n, k, 4, platform);
    d.source = TilingSource::kDefault;
    return d;
}

LinearAddGeluTilingData FillTilingData(const Tunables& t, int64_t m, int64_t n, int64_t k)
{
    LinearAddGeluTilingData data{};  // fields a plain matmul does not use stay zero
    CubeTilingData& c = data.cube;
    c.usedCoreNum = static_cast<int32_t>(Tiles(t, m, n));
    c.M = static_cast<int32_t>(m);
    c.N = static_cast<int32_t>(n);
    c.Ka = static_cast<int32_t>(k);
    c.Kb = static_cast<int32_t>(k);
    c.singleCoreM = t.singleCoreM;
    c.singleCoreN = t.singleCoreN;
    c.singleCoreK = static_cast<int32_t>(k);
    c.baseM = t.baseM;
    c.baseN = t.baseN;
    c.baseK = t.baseK;
    c.depthA1 = t.depthA1;
    c.depthB1 = t.depthB1;
    c.stepM = t.stepM;
    c.stepN = t.stepN;
    c.iterateOrder = t.iterateOrder;
    c.batchM = 1;
    c.batchN = 1;
    c.singleBatchM = 1;
    c.singleBatchN = 1;
    c.stepKa = std::max(1, t.depthA1 / t.stepM);
    c.stepKb = std::max(1, t.depthB1 / t.stepN);
    c.dbL0A = kDbL0AB;
    c.dbL0B = kDbL0AB;
    c.dbL0C = t.dbL0C;
    data.epiRows = t.epiRows;
    return data;
}

}  // namespace lag_host
