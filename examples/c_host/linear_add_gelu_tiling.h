// The host side of linear_add_gelu's tiling: the tiling struct the kernel receives and the
// TilingFunc that fills it, as an Ascend C operator's op_host code holds them.
//
// On a CANN host the struct would come from BEGIN_TILING_DATA_DEF (or tiling/tiling_api.h's
// TCubeTiling) and the platform sizes from platform_ascendc::PlatformAscendC; this example has
// neither header, so both are written out here. kernel_twin.cpp checks at compile time that
// every field sits at the byte offset where the kernel (kernels/ops/linear_add_gelu) reads it,
// and the tests check the values against tilewise's Python spec (OpSpec.tiling_struct).
#pragma once

#include <cstdint>
#include <string>

namespace lag_host {

// CANN 8.x TCubeTiling: 50 int32 fields in this order (X-macro: the struct, the printing and the
// offset checks all come from this one list).
#define LAG_CUBE_FIELDS(X)                                                                              \
    X(usedCoreNum) X(M) X(N) X(Ka) X(Kb) X(singleCoreM) X(singleCoreN) X(singleCoreK) X(baseM) X(baseN) \
    X(baseK) X(depthA1) X(depthB1) X(stepM) X(stepN) X(isBias) X(transLength) X(iterateOrder)           \
    X(shareMode) X(shareL1Size) X(shareL0CSize) X(shareUbSize) X(batchM) X(batchN) X(singleBatchM)      \
    X(singleBatchN) X(stepKa) X(stepKb) X(depthAL1CacheUB) X(depthBL1CacheUB) X(dbL0A) X(dbL0B)         \
    X(dbL0C) X(ALayoutInfoB) X(ALayoutInfoS) X(ALayoutInfoN) X(ALayoutInfoG) X(ALayoutInfoD)            \
    X(BLayoutInfoB) X(BLayoutInfoS) X(BLayoutInfoN) X(BLayoutInfoG) X(BLayoutInfoD) X(CLayoutInfoB)     \
    X(CLayoutInfoS1) X(CLayoutInfoN) X(CLayoutInfoG) X(CLayoutInfoS2) X(BatchNum) X(reserved)

#define LAG_DECLARE_FIELD(name) int32_t name;
struct CubeTilingData {
    LAG_CUBE_FIELDS(LAG_DECLARE_FIELD)
};
#undef LAG_DECLARE_FIELD
static_assert(sizeof(CubeTilingData) == 200, "TCubeTiling is 50 int32 fields");

// The kernel's LinearAddGeluTiling, passed by value as its last argument.
struct LinearAddGeluTilingData {
    CubeTilingData cube;
    int32_t epiRows;
};
static_assert(sizeof(LinearAddGeluTilingData) == 204, "LinearAddGeluTiling is 51 int32 fields");

// Per-core sizes and core counts of the platform the kernel runs on: what PlatformAscendC's
// GetCoreNumAic, GetCoreNumAiv and GetCoreMemSize report. The CPU twin keeps Ascend910B1's
// (tilewise's cpu-twin target, unless TILEWISE_TWIN_PROFILE names another profile).
struct Platform {
    int64_t cubeCores, vectorCores;
    int64_t ub;  // usable by a MIX kernel's TPipe: 8 KiB for API temporaries and 256 B less
    int64_t l1, l0a, l0b, l0c;
};
Platform TwinPlatform();

// The tunable fields, as the tiling table holds them (tilewise's names).
struct Tunables {
    int32_t baseM, baseN, baseK, stepM, stepN, depthA1, depthB1, dbL0C, iterateOrder, epiRows;
    int32_t singleCoreM, singleCoreN;
};

// Where a tiling came from, as tilewise's runtime names it.
enum class TilingSource { kExact, kNearest, kDefault, kGiven };  // kGiven: by the caller
const char* SourceName(TilingSource source);

struct TilingDecision {
    Tunables tunables;
    TilingSource source;
    std::string note;  // why the default was used, when it was
    int tableAnswer;   // what the header's lookup returned (TILEWISE_EXACT, _NEAREST, _NOT_FOUND)
    Tunables tableTunables;  // and its tiling, when it found one
};

// Every rule the tiling breaks for shape (m, n, k) on the platform, "" when it is valid: the
// op's validity rules and its on-chip footprint (tilewise's LinearAddGelu.check).
std::string CheckTiling(const Tunables& t, int64_t m, int64_t n, int64_t k, int64_t dtypeBytes,
                        const Platform& platform);

// The op's default tiling heuristic (tilewise's LinearAddGelu.default_tiling).
Tunables DefaultTiling(int64_t m, int64_t n, int64_t k, int64_t dtypeBytes, const Platform& platform);

// The TilingFunc's choice: the tiling table's exact answer; its nearest answer when valid for
// this shape; else the default heuristic. useTable false skips the table (an A/B comparison).
TilingDecision ChooseTiling(int64_t m, int64_t n, int64_t k, const Platform& platform, bool useTable);

// The kernel's struct for the tunables (tilewise's LinearAddGelu.tiling_struct).
LinearAddGeluTilingData FillTilingData(const Tunables& t, int64_t m, int64_t n, int64_t k);

// The kernel's tiles (usedCoreNum): one singleCoreM x singleCoreN tile of out per vector block.
uint32_t Tiles(const Tunables& t, int64_t m, int64_t n);

// The launch's blockDim: the kernel is MIX, launched on AI cores that each run a cube core's
// vector blocks (two on a 910B: GetBlockIdx over [0, 2 * blockDim)), one tile each.
uint32_t BlockDim(const Tunables& t, int64_t m, int64_t n, const Platform& platform);

// Vector blocks per AI core of a MIX launch (2 on a 910B).
uint32_t VectorBlocksPerCore(const Platform& platform);

}  // namespace lag_host
