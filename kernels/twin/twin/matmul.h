// The Matmul high-level API: TCubeTiling, MatmulType, Matmul, REGIST_MATMUL_OBJ.
//
// Staging follows the tiling: Init takes depthA1 A tiles and depthB1 B tiles from L1, dbL0A / dbL0B
// tiles from L0A / L0B and dbL0C C blocks from L0C (errors on overflow). Iterate computes one
// baseM x baseN block of C over the whole single-core K. Per baseK slice, A tiles come from an L1
// cache of depthA1 / (stepM*stepKa) groups of stepM x stepKa tiles (a miss loads a whole group
// from GM, least recently used group out); B likewise with stepN x stepKb tiles. Tiles are zero
// padded at the edges when they reach L1 (B in the micro-kernel's panel layout), go L1 -> L0 (a
// conversion for half, nothing to move for float) and are multiplied into the float C block in
// L0C by a register-blocked micro-kernel (6 x 64 with AVX-512, 6 x 16 with AVX2), skipping what
// is only padding.
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipe.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

struct TCubeTiling {
    int32_t usedCoreNum, M, N, Ka, Kb, singleCoreM, singleCoreN, singleCoreK, baseM, baseN, baseK;
    int32_t depthA1, depthB1, stepM, stepN, isBias, transLength, iterateOrder, shareMode;
    int32_t shareL1Size, shareL0CSize, shareUbSize, batchM, batchN, singleBatchM, singleBatchN;
    int32_t stepKa, stepKb, depthAL1CacheUB, depthBL1CacheUB, dbL0A, dbL0B, dbL0C;
    // Layout fields of batched/attention matmuls: unused by the twin, kept so the struct has
    // CANN 8.x's layout (50 int32, 200 bytes) and a kernel's tiling struct matches the device's.
    int32_t ALayoutInfoB, ALayoutInfoS, ALayoutInfoN, ALayoutInfoG, ALayoutInfoD;
    int32_t BLayoutInfoB, BLayoutInfoS, BLayoutInfoN, BLayoutInfoG, BLayoutInfoD;
    int32_t CLayoutInfoB, CLayoutInfoS1, CLayoutInfoN, CLayoutInfoG, CLayoutInfoS2;
    int32_t BatchNum, reserved;
};
static_assert(sizeof(TCubeTiling) == 200, "TCubeTiling must be CANN's 50 int32 fields");

namespace AscendC {

using ::TCubeTiling;

enum class CubeFormat { ND = 0, NZ, ZN, ZZ, NN, ND_ALIGN, SCALAR, VECTOR };

template <TPosition POSITION, CubeFormat FORMAT, typename TYPE, bool ISTRANS = false>
struct MatmulType {
    constexpr static TPosition pos = POSITION;
    constexpr static CubeFormat format = FORMAT;
    using T = TYPE;
    constexpr static bool isTrans = ISTRANS;
};

struct MatmulConfig {
    bool doNorm;
    bool doBasicBlock;
    bool doMultiDataLoad;
};
inline constexpr MatmulConfig CFG_NORM = {true, false, false};
inline constexpr MatmulConfig CFG_MDL = {false, false, true};

}  // namespace AscendC

namespace twin {

// The cube's arithmetic on the host: C (row-major, float) += A (row-major) * B, where L0B holds B
// packed in panels of kPanel columns ([n/kPanel][k][kPanel], a last panel of 16, 32 or 48 when n
// is not a multiple of kPanel; baseN is always a multiple of 16). Each micro-kernel call keeps an
// MR x panel block of C in registers over the whole k of the L0 tiles.
#if defined(__AVX512F__)
// 6 x 64: 24 accumulators, 4 B vectors and the broadcast A element use 29 of the 32 zmm; each k
// loads 10 vectors for 24 FMAs. On a Xeon with two 512-bit FMA ports the 8 x 32 block it replaces
// (10 loads for 16 FMAs) ran 148-153 GFLOP/s per core in a standalone loop over a 128 x 256 C
// block with K = 32, this one 172-181.
constexpr int kPanel = 64;
constexpr int kMicroRows = 6;
#else
constexpr int kPanel = 16;
constexpr int kMicroRows = 6;
#endif

#if defined(__AVX512F__)
// C[MR x 16*NV] (row stride ldc) += A[MR x K] (row stride lda) * B, B the first 16*NV columns of
// a panel [K][PITCH].
template <int MR, int NV, int PITCH>
TW_NOINLINE void MicroKernel(int K, const float* A, int lda, const float* B, float* C, int ldc)
{
    __m512 c[MR][NV];
    for (int r = 0; r < MR; ++r) {
        for (int v = 0; v < NV; ++v) c[r][v] = _mm512_loadu_ps(C + r * ldc + 16 * v);
    }
    for (int k = 0; k < K; ++k) {
        __m512 b[NV];
        for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(B + k * PITCH + 16 * v);
        for (int r = 0; r < MR; ++r) {
            const __m512 a = _mm512_set1_ps(A[r * lda + k]);
            for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
    }
}

// `width` columns of C (a multiple of 16, at most PITCH) from a panel PITCH columns wide.
template <int MR, int PITCH, int NV = PITCH / 16>
inline void MicroWidth(int K, const float* A, int lda, const float* panel, int width, float* C, int ldc)
{
    if constexpr (NV > 1) {
        if (width < 16 * NV) return MicroWidth<MR, PITCH, NV - 1>(K, A, lda, panel, width, C, ldc);
    }
    MicroKernel<MR, NV, PITCH>(K, A, lda, panel, C, ldc);
}

// `width` columns of C from a panel `pitch` columns wide (both multiples of 16, up to kPanel).
template <int MR>
inline void MicroRows(int K, const float* A, int lda, const float* panel, int width, int pitch, float* C, int ldc)
{
    switch (pitch) {
    case 64: return MicroWidth<MR, 64>(K, A, lda, panel, width, C, ldc);
    case 48: return MicroWidth<MR, 48>(K, A, lda, panel, width, C, ldc);
    case 32: return MicroWidth<MR, 32>(K, A, lda, panel, width, C, ldc);
    default: return MicroWidth<MR, 16>(K, A, lda, panel, width, C, ldc);
    }
}
#else
// C[MR x 16] (row stride ldc) += A[MR x K] (row stride lda) * B, B a panel [K][16].
template <int MR>
TW_NOINLINE void MicroRows(int K, const float* A, int lda, const float* B, int /*width*/, int /*pitch*/, float* C,
                           int ldc)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 c0[MR], c1[MR];
    for (int r = 0; r < MR; ++r) {
        c0[r] = _mm256_loadu_ps(C + r * ldc);
        c1[r] = _mm256_loadu_ps(C + r * ldc + 8);
    }
    for (int k = 0; k < K; ++k) {
        const __m256 b0 = _mm256_loadu_ps(B + k * kPanel), b1 = _mm256_loadu_ps(B + k * kPanel + 8);
        for (int r = 0; r < MR; ++r) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
            c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
        }
    }
    for (int r = 0; r < MR; ++r) {
        _mm256_storeu_ps(C + r * ldc, c0[r]);
        _mm256_storeu_ps(C + r * ldc + 8, c1[r]);
    }
#else
    float acc[MR][kPanel];
    for (int r = 0; r < MR; ++r) {
        for (int j = 0; j < kPanel; ++j) acc[r][j] = C[r * ldc + j];
    }
    for (int k = 0; k < K; ++k) {
        for (int r = 0; r < MR; ++r) {
            const float a = A[r * lda + k];
            for (int j = 0; j < kPanel; ++j) acc[r][j] += a * B[k * kPanel + j];
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int j = 0; j < kPanel; ++j) C[r * ldc + j] = acc[r][j];
    }
#endif
}
#endif

// The rows left over when kMicroRows does not divide m: one call of `rows` (< R) rows.
template <int R>
inline void TailRows(int rows, int K, const float* A, int lda, const float* panel, int width, int pitch, float* C,
                     int ldc)
{
    if constexpr (R > 0) {
        if (rows == R) {
            MicroRows<R>(K, A, lda, panel, width, pitch, C, ldc);
        } else {
            TailRows<R - 1>(rows, K, A, lda, panel, width, pitch, C, ldc);
        }
    }
}

// C[m x n] (row stride ldc) += A[m x k] (row stride lda) * B[k x n], B packed in panels of kFull
// rows and nFull columns in all (see above; only the first k rows of each panel are read); n and
// nFull multiples of 16, n <= nFull (a last panel may be half used).
TW_NOINLINE inline void Mmad(float* C, int ldc, const float* A, int lda, const float* B, int kFull, int nFull, int m,
                             int n, int k)
{
    int i = 0;
    for (; i + kMicroRows <= m; i += kMicroRows) {
        for (int j = 0; j < n; j += kPanel) {
            MicroRows<kMicroRows>(k, A + i * lda, lda, B + j * kFull, std::min(kPanel, n - j),
                                  std::min(kPanel, nFull - j), C + i * ldc + j, ldc);
        }
    }
    if (i == m) return;
    for (int j = 0; j < n; j += kPanel) {
        TailRows<kMicroRows - 1>(m - i, k, A + i * lda, lda, B + j * kFull, std::min(kPanel, n - j),
                                 std::min(kPanel, nFull - j), C + i * ldc + j, ldc);
    }
}

inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

// L1 slots holding groups of tiles, least recently used out.
struct GroupCache {
    std::vector<int64_t> keys;
    std::vector<uint64_t> lastUse;
    uint64_t clock = 0;

    void Reset(int32_t slots)
    {
        keys.assign(slots, -1);
        lastUse.assign(slots, 0);
    }
    void Invalidate() { keys.assign(keys.size(), -1); }

    // The slot holding `key`; *miss tells whether the caller must (re)load it.
    int32_t Lookup(int64_t key, bool* miss)
    {
        int32_t victim = 0;
        for (int32_t s = 0; s < int32_t(keys.size()); ++s) {
            if (keys[s] == key) {
                lastUse[s] = ++clock;
                *miss = false;
                return s;
            }
            if (lastUse[s] < lastUse[victim]) victim = s;
        }
        keys[victim] = key;
        lastUse[victim] = ++clock;
        *miss = true;
        return victim;
    }
};

// Matmul state and data movement for source type S (float or half) and bias type BiasT.
template <typename S, typename BiasT>
class CubeEngine {
public:
    TW_NOINLINE void Init(const TCubeTiling& tiling)
    {
        t_ = tiling;
        Validate();
        CoreState& core = Core();
        auto alloc = [&](Mem mem, uint64_t bytes) {
            if (bytes > UINT32_MAX) Fail("Matmul::Init: ", MemName(mem), " overflow: requested ", bytes, " B");
            return core.Of(mem).At(core.Of(mem).Alloc(uint32_t(bytes), "Matmul::Init", mem));
        };
        const uint64_t aTile = uint64_t(t_.baseM) * t_.baseK, bTile = uint64_t(t_.baseK) * t_.baseN;
        aL1_ = reinterpret_cast<S*>(alloc(Mem::L1, t_.depthA1 * aTile * sizeof(S)));
        bL1_ = reinterpret_cast<S*>(alloc(Mem::L1, t_.depthB1 * bTile * sizeof(S)));
        if (t_.isBias) {
            biasL1_ = reinterpret_cast<BiasT*>(alloc(Mem::L1, uint64_t(t_.baseN) * sizeof(BiasT)));
            if (core.Of(Mem::BT).Limit() > 0) alloc(Mem::BT, uint64_t(t_.baseN) * sizeof(float));
        }
        uint8_t* l0a = alloc(Mem::L0A, t_.dbL0A * aTile * sizeof(S));
        uint8_t* l0b = alloc(Mem::L0B, t_.dbL0B * bTile * sizeof(S));
        l0c_ = reinterpret_cast<float*>(alloc(Mem::L0C, uint64_t(t_.dbL0C) * t_.baseM * t_.baseN * 4));
        if constexpr (std::is_same_v<S, float>) {
            l0a_ = reinterpret_cast<float*>(l0a);
            l0b_ = reinterpret_cast<float*>(l0b);
        } else {  // the cube reads half; the twin multiplies float copies of the L0 tiles
            scratchA_.resize(t_.dbL0A * aTile);
            scratchB_.resize(t_.dbL0B * bTile);
            l0a_ = scratchA_.data();
            l0b_ = scratchB_.data();
        }
        aCache_.Reset(t_.depthA1 / (t_.stepM * t_.stepKa));
        bCache_.Reset(t_.depthB1 / (t_.stepN * t_.stepKb));
        SetTail(-1, -1, -1);
        inited_ = true;
    }

    void SetA(const S* a) { a_ = a; aCache_.Invalidate(); Restart(); }
    void SetB(const S* b) { b_ = b; bCache_.Invalidate(); Restart(); }
    void SetBias(const BiasT* bias)
    {
        if (!t_.isBias) Fail("Matmul::SetBias: the tiling has isBias = 0");
        bias_ = bias;
        Restart();
    }
    void DisableBias() { bias_ = nullptr; }

    void SetTail(int tailM, int tailN, int tailK)
    {
        curM_ = tailM >= 0 ? tailM : t_.singleCoreM;
        curN_ = tailN >= 0 ? tailN : t_.singleCoreN;
        curK_ = tailK >= 0 ? tailK : t_.singleCoreK;
        if (curM_ > t_.singleCoreM || curN_ > t_.singleCoreN || curK_ > t_.singleCoreK) {
            Fail("Matmul::SetTail(", tailM, ", ", tailN, ", ", tailK, "): beyond singleCore (", t_.singleCoreM,
                 ", ", t_.singleCoreN, ", ", t_.singleCoreK, ")");
        }
        aCache_.Invalidate();
        bCache_.Invalidate();
        Restart();
    }

    void Restart() { iter_ = -1; }

    TW_NOINLINE bool Iterate(bool enPartialSum)
    {
        if (!inited_) Fail("Matmul::Iterate: Init (REGIST_MATMUL_OBJ) was not called");
        if (a_ == nullptr || b_ == nullptr) Fail("Matmul::Iterate: call SetTensorA and SetTensorB first");
        const int32_t mIters = CeilDiv(curM_, t_.baseM), nIters = CeilDiv(curN_, t_.baseN);
        if (++iter_ >= mIters * nIters) {
            Restart();
            return false;
        }
        if (t_.iterateOrder == 0) {
            mb_ = iter_ % mIters;
            nb_ = iter_ / mIters;
        } else {
            nb_ = iter_ % nIters;
            mb_ = iter_ / nIters;
        }
        if (!enPartialSum) cSlot_ = iter_ % t_.dbL0C;
        float* c = CBlock();
        if (!enPartialSum) InitC(c);
        // Like the cube, which works in 16 x 16 fractals, the twin multiplies only what holds data:
        // an edge block's padding rows (in steps of 16) and panels of padding columns and a K
        // tail's zeros are skipped (the padded part of the C block keeps its initial value).
        const int32_t rows = RoundUp(uint32_t(BlockRows()), 16);
        const int32_t cols = std::min<int32_t>(t_.baseN, RoundUp(uint32_t(BlockCols()), 16));
        const int32_t kIters = CeilDiv(curK_, t_.baseK);
        for (int32_t kb = 0; kb < kIters; ++kb) {
            const float* a = LoadL0A(ATile(kb));
            const float* b = LoadL0B(BTile(kb));
            Mmad(c, t_.baseN, a, t_.baseK, b, t_.baseK, t_.baseN, rows, cols,
                 std::min(t_.baseK, curK_ - kb * t_.baseK));
        }
        return true;
    }

    // The current C block (baseM x baseN floats, row stride baseN) and its valid extents.
    const float* CurrentC()
    {
        if (iter_ < 0) Fail("Matmul::GetTensorC: no block computed (call Iterate first)");
        return CBlock();
    }
    int32_t BlockRows() const { return std::min(t_.baseM, curM_ - mb_ * t_.baseM); }
    int32_t BlockCols() const { return std::min(t_.baseN, curN_ - nb_ * t_.baseN); }
    int32_t BlockM() const { return mb_; }
    int32_t BlockN() const { return nb_; }
    const TCubeTiling& Tiling() const { return t_; }

private:
    float* CBlock() const { return l0c_ + int64_t(cSlot_) * t_.baseM * t_.baseN; }

    void Validate() const
    {
        auto need = [](bool ok, auto... what) {
            if (!ok) Fail("Matmul::Init: ", what...);
        };
        const TCubeTiling& t = t_;
        need(t.M > 0 && t.N > 0 && t.Ka > 0 && t.Kb > 0, "M, N, Ka, Kb must be positive");
        need(t.singleCoreM > 0 && t.singleCoreN > 0 && t.singleCoreK > 0, "singleCoreM/N/K must be positive");
        need(t.singleCoreK <= t.Ka, "singleCoreK ", t.singleCoreK, " exceeds Ka ", t.Ka);
        need(t.baseM > 0 && t.baseM % 16 == 0, "baseM ", t.baseM, " is not a positive multiple of 16");
        need(t.baseN > 0 && t.baseN % 16 == 0, "baseN ", t.baseN, " is not a positive multiple of 16");
        const int32_t c0 = 32 / int32_t(sizeof(S));
        need(t.baseK > 0 && t.baseK % c0 == 0, "baseK ", t.baseK, " is not a positive multiple of ", c0,
             " (", sizeof(S) * 8, "-bit input)");
        need(t.stepM > 0 && t.stepN > 0 && t.stepKa > 0 && t.stepKb > 0, "stepM/N/Ka/Kb must be positive");
        need(t.depthA1 > 0 && t.depthA1 % (t.stepM * t.stepKa) == 0, "depthA1 ", t.depthA1,
             " is not a positive multiple of stepM*stepKa = ", t.stepM * t.stepKa);
        need(t.depthB1 > 0 && t.depthB1 % (t.stepN * t.stepKb) == 0, "depthB1 ", t.depthB1,
             " is not a positive multiple of stepN*stepKb = ", t.stepN * t.stepKb);
        need(t.dbL0A >= 1 && t.dbL0A <= 2 && t.dbL0B >= 1 && t.dbL0B <= 2 && t.dbL0C >= 1 && t.dbL0C <= 2,
             "dbL0A/dbL0B/dbL0C must be 1 or 2");
        need(t.iterateOrder == 0 || t.iterateOrder == 1, "iterateOrder ", t.iterateOrder, " is not 0 or 1");
    }

    void InitC(float* c) const
    {
        const int64_t n = int64_t(t_.baseM) * t_.baseN;
        for (int64_t i = 0; i < n; ++i) c[i] = 0.0f;
        if (bias_ == nullptr) return;
        const int32_t cols = BlockCols();
        const BiasT* src = bias_ + int64_t(nb_) * t_.baseN;
        for (int32_t j = 0; j < cols; ++j) biasL1_[j] = src[j];  // GM -> L1, then broadcast
        for (int32_t r = 0; r < t_.baseM; ++r) {
            for (int32_t j = 0; j < cols; ++j) c[int64_t(r) * t_.baseN + j] = static_cast<float>(biasL1_[j]);
        }
    }

    // dst[0, valid) = src[0, valid), dst[valid, total) = 0.
    TW_NOINLINE static void CopyRow(S* dst, const S* src, int32_t valid, int32_t total)
    {
        TW_IVDEP
        for (int32_t c = 0; c < valid; ++c) dst[c] = src[c];
        for (int32_t c = valid; c < total; ++c) dst[c] = S(0);
    }

    // Rows of a tile lie a whole matrix row apart in GM, too far apart for the hardware
    // prefetcher: while row r is copied, row r + kRowsAhead (of this tile or, past its end, of the
    // next tile down the matrix; `avail` rows of the matrix are left) is requested, so the walk
    // does not wait for memory at every row. (The MTE engines stream such strides on the device.)
    static constexpr int32_t kRowsAhead = 8;

    static void Prefetch(const S* src, int64_t ld, int32_t r, int32_t avail, int32_t cols)
    {
        if (r + kRowsAhead >= avail) return;
        const char* row = reinterpret_cast<const char*>(src + (r + kRowsAhead) * ld);
        for (int64_t b = 0; b < int64_t(cols) * int64_t(sizeof(S)); b += 64) __builtin_prefetch(row + b, 0, 3);
    }

    // GM -> L1, A side: rows x cols of src (row stride ld) into a zero-padded row-major tile of
    // tileRows x tileCols.
    TW_NOINLINE static void LoadTile(S* tile, int32_t tileRows, int32_t tileCols, const S* src, int64_t ld, int32_t rows,
                                     int32_t cols)
    {
        const int32_t avail = rows;
        rows = std::max(0, std::min(rows, tileRows));
        cols = std::max(0, std::min(cols, tileCols));
        for (int32_t r = 0; r < tileRows; ++r) {
            if (r < rows) Prefetch(src, ld, r, avail, cols);
            CopyRow(tile + int64_t(r) * tileCols, src + r * ld, r < rows ? cols : 0, tileCols);
        }
    }

    // GM -> L1, B side: the same zero-padded tile, laid out in the panels the micro-kernel reads
    // (see Mmad): the twin's stand-in for the cube's fractal L1 layout. GM is read row by row, so
    // each visit to a row of B (N elements apart) reads all of its tileCols contiguous elements.
    TW_NOINLINE static void LoadPanels(S* tile, int32_t tileRows, int32_t tileCols, const S* src, int64_t ld,
                                       int32_t rows, int32_t cols)
    {
        const int32_t avail = rows;
        rows = std::max(0, std::min(rows, tileRows));
        cols = std::max(0, std::min(cols, tileCols));
        for (int32_t r = 0; r < tileRows; ++r) {
            if (r < rows) Prefetch(src, ld, r, avail, cols);
            PanelRow(tile, tileRows, tileCols, src + r * ld, r, r < rows ? cols : 0);
        }
    }

    // Row r of a B tile (cols valid elements at in, 0 for a padding row) into every panel: whole
    // panels, then the ones with padding columns.
    TW_NOINLINE static void PanelRow(S* tile, int32_t tileRows, int32_t tileCols, const S* in, int32_t r, int32_t cols)
    {
        const int32_t full = cols / kPanel * kPanel;
        for (int32_t j = 0; j < full; j += kPanel) {
            S* out = tile + int64_t(j) * tileRows + int64_t(r) * kPanel;
            // memcpy says L1 and GM do not overlap: an element loop here is unrolled before the
            // vectorizer sees it and then copied one element at a time.
            std::memcpy(out, in + j, kPanel * sizeof(S));
        }
        for (int32_t j = full; j < tileCols; j += kPanel) {
            const int32_t width = std::min(kPanel, tileCols - j);
            CopyRow(tile + int64_t(j) * tileRows + int64_t(r) * width, in + j, std::max(0, cols - j), width);
        }
    }

    const S* ATile(int32_t kb)
    {
        const int32_t kGroups = CeilDiv(CeilDiv(curK_, t_.baseK), t_.stepKa);
        const int32_t gm = mb_ / t_.stepM, gk = kb / t_.stepKa;
        const int64_t tile = int64_t(t_.baseM) * t_.baseK, group = tile * t_.stepM * t_.stepKa;
        bool miss = false;
        const int32_t slot = aCache_.Lookup(int64_t(gm) * kGroups + gk, &miss);
        S* base = aL1_ + slot * group;
        if (miss) {
            for (int32_t i = 0; i < t_.stepM; ++i) {
                for (int32_t j = 0; j < t_.stepKa; ++j) {
                    const int32_t row = (gm * t_.stepM + i) * t_.baseM, col = (gk * t_.stepKa + j) * t_.baseK;
                    LoadTile(base + (i * t_.stepKa + j) * tile, t_.baseM, t_.baseK, a_ + int64_t(row) * t_.Ka + col,
                             t_.Ka, curM_ - row, curK_ - col);
                }
            }
        }
        return base + ((mb_ % t_.stepM) * t_.stepKa + kb % t_.stepKa) * tile;
    }

    const S* BTile(int32_t kb)
    {
        const int32_t nGroups = CeilDiv(CeilDiv(curN_, t_.baseN), t_.stepN);
        const int32_t gk = kb / t_.stepKb, gn = nb_ / t_.stepN;
        const int64_t tile = int64_t(t_.baseK) * t_.baseN, group = tile * t_.stepKb * t_.stepN;
        bool miss = false;
        const int32_t slot = bCache_.Lookup(int64_t(gk) * nGroups + gn, &miss);
        S* base = bL1_ + slot * group;
        if (miss) {
            for (int32_t i = 0; i < t_.stepKb; ++i) {
                for (int32_t j = 0; j < t_.stepN; ++j) {
                    const int32_t row = (gk * t_.stepKb + i) * t_.baseK, col = (gn * t_.stepN + j) * t_.baseN;
                    LoadPanels(base + (i * t_.stepN + j) * tile, t_.baseK, t_.baseN, b_ + int64_t(row) * t_.N + col,
                               t_.N, curK_ - row, curN_ - col);
                }
            }
        }
        return base + ((kb % t_.stepKb) * t_.stepN + nb_ % t_.stepN) * tile;
    }

    // L1 -> L0A / L0B: the tile as float in the same layout. For float input the twin's L1 tile
    // already is what the cube reads, so the move costs nothing (L0 capacity was checked in Init).
    const float* LoadL0A(const S* tile)
    {
        l0aSlot_ = (l0aSlot_ + 1) % t_.dbL0A;
        return ToL0(l0a_ + int64_t(l0aSlot_) * t_.baseM * t_.baseK, tile, int64_t(t_.baseM) * t_.baseK);
    }

    const float* LoadL0B(const S* tile)
    {
        l0bSlot_ = (l0bSlot_ + 1) % t_.dbL0B;
        return ToL0(l0b_ + int64_t(l0bSlot_) * t_.baseK * t_.baseN, tile, int64_t(t_.baseK) * t_.baseN);
    }

    static const float* ToL0(float* dst, const S* tile, int64_t n)
    {
        if constexpr (std::is_same_v<S, float>) {
            (void)dst;
            (void)n;
            return tile;
        } else {
            TW_IVDEP
            for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(tile[i]);
            return dst;
        }
    }

    TCubeTiling t_{};
    bool inited_ = false;
    const S* a_ = nullptr;
    const S* b_ = nullptr;
    const BiasT* bias_ = nullptr;
    S* aL1_ = nullptr;
    S* bL1_ = nullptr;
    BiasT* biasL1_ = nullptr;
    float* l0a_ = nullptr;
    float* l0b_ = nullptr;
    float* l0c_ = nullptr;
    std::vector<float> scratchA_, scratchB_;
    GroupCache aCache_, bCache_;
    int32_t curM_ = 0, curN_ = 0, curK_ = 0;
    int32_t iter_ = -1, mb_ = 0, nb_ = 0, cSlot_ = 0, l0aSlot_ = 0, l0bSlot_ = 0;
};

}  // namespace twin

namespace AscendC {

template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE, const auto& MM_CFG = CFG_NORM>
class Matmul {
    using SrcT = typename A_TYPE::T;
    using DstT = typename C_TYPE::T;
    using BiasT = typename BIAS_TYPE::T;
    static_assert(std::is_same_v<SrcT, typename B_TYPE::T>, "Matmul: A and B must have the same type");
    static_assert(std::is_same_v<SrcT, float> || std::is_same_v<SrcT, half>, "Matmul: A/B must be float or half");
    static_assert(std::is_same_v<DstT, float> || std::is_same_v<DstT, half>, "Matmul: C must be float or half");
    static_assert(A_TYPE::format == CubeFormat::ND && B_TYPE::format == CubeFormat::ND &&
                      C_TYPE::format == CubeFormat::ND,
                  "Matmul: the twin supports CubeFormat::ND only");

public:
    void Init(const TCubeTiling* cubeTiling, TPipe* tpipe = nullptr)
    {
        (void)tpipe;
        if (cubeTiling == nullptr) twin::Fail("Matmul::Init: tiling is null");
        engine_.Init(*cubeTiling);
    }

    void SetTensorA(const GlobalTensor<SrcT>& gm, bool isTransposeA = false)
    {
        if (isTransposeA || A_TYPE::isTrans) twin::Fail("Matmul::SetTensorA: transposed A is not supported by the twin");
        engine_.SetA(gm.TwData());
    }
    void SetTensorB(const GlobalTensor<SrcT>& gm, bool isTransposeB = false)
    {
        if (isTransposeB || B_TYPE::isTrans) twin::Fail("Matmul::SetTensorB: transposed B is not supported by the twin");
        engine_.SetB(gm.TwData());
    }
    void SetBias(const GlobalTensor<BiasT>& gm) { engine_.SetBias(gm.TwData()); }
    void DisableBias() { engine_.DisableBias(); }
    void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) { engine_.SetTail(tailM, tailN, tailK); }
    void SetSingleShape(int singleM, int singleN, int singleK) { engine_.SetTail(singleM, singleN, singleK); }

    template <bool sync = true>
    bool Iterate(bool enPartialSum = false) { return engine_.Iterate(enPartialSum); }

    // The current block as baseM x baseN (row stride baseN); only BlockRows x BlockCols are valid.
    // That is the sequential write; without it the device writes the block at its place in the
    // [singleCoreM, singleCoreN] result, which a baseM x baseN buffer does not hold.
    template <bool sync = true>
    void GetTensorC(const LocalTensor<DstT>& c, uint8_t enAtomic = 0, bool enSequentialWrite = false)
    {
        (void)enAtomic;
        if (!enSequentialWrite) {
            twin::Fail("Matmul::GetTensorC to a LocalTensor without enSequentialWrite writes the block at its place "
                 "in the [singleCoreM, singleCoreN] result, which the twin does not model: pass "
                 "GetTensorC(c, 0, true) for the block as [baseM, baseN]");
        }
        const TCubeTiling& t = engine_.Tiling();
        const int64_t n = int64_t(t.baseM) * t.baseN;
        const float* src = engine_.CurrentC();
        twin::CheckLocal("Matmul::GetTensorC", c, uint64_t(n));
        DstT* dst = c.TwData();
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<DstT>(src[i]);
    }

    // The valid part of the current block into gm (the single-core C, row stride N); enAtomic adds.
    template <bool sync = true>
    void GetTensorC(const GlobalTensor<DstT>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false)
    {
        if (enSequentialWrite) {
            twin::Fail("Matmul::GetTensorC to GM with enSequentialWrite (the block as [baseM, baseN]) is not "
                 "modelled by the twin: write the block at its place (enSequentialWrite false)");
        }
        const TCubeTiling& t = engine_.Tiling();
        const float* src = engine_.CurrentC();
        const int32_t rows = engine_.BlockRows(), cols = engine_.BlockCols();
        const int64_t origin = int64_t(engine_.BlockM()) * t.baseM * t.N + int64_t(engine_.BlockN()) * t.baseN;
        gm.TwCheckRange("Matmul::GetTensorC", origin + int64_t(rows - 1) * t.N + cols);
        DstT* dst = gm.TwData() + origin;
        for (int32_t r = 0; r < rows; ++r) {
            DstT* row = dst + int64_t(r) * t.N;
            const float* in = src + int64_t(r) * t.baseN;
            for (int32_t j = 0; j < cols; ++j) {
                row[j] = static_cast<DstT>(enAtomic ? static_cast<float>(row[j]) + in[j] : in[j]);
            }
        }
    }

    template <bool sync = true>
    void IterateAll(const GlobalTensor<DstT>& gm, uint8_t enAtomic = 0, bool enSequentialWrite = false)
    {
        while (Iterate()) GetTensorC(gm, enAtomic, enSequentialWrite);
    }

    void End() { engine_.Restart(); }

private:
    twin::CubeEngine<SrcT, BiasT> engine_;
};

}  // namespace AscendC

namespace matmul {
using namespace AscendC;
}

namespace twin {

inline void RegistMatmulObj(AscendC::TPipe*, GM_ADDR) {}

template <typename MM, typename TilingPtr, typename... Rest>
inline void RegistMatmulObj(AscendC::TPipe* pipe, GM_ADDR workspace, MM& mm, TilingPtr tiling, Rest&&... rest)
{
    if constexpr (!std::is_null_pointer_v<TilingPtr>) {
        if (tiling != nullptr) mm.Init(tiling, pipe);
    }
    RegistMatmulObj(pipe, workspace, std::forward<Rest>(rest)...);
}

}  // namespace twin

#define REGIST_MATMUL_OBJ(tpipe, workspace, ...) ::twin::RegistMatmulObj(tpipe, workspace, __VA_ARGS__)
