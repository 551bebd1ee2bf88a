/**
 * LayerNormGelu: out = GELU_tanh((x - mean) * rstd * gamma + beta) per row, x [R, H], gamma/beta [H].
 *
 * Block b owns blockRows consecutive rows. When a row fits UB (hTile >= H) rows go through UB
 * rowsPerTile at a time, hTile apart, and gamma/beta stay in UB for the whole block. Otherwise a
 * row takes two passes in chunks of hTile: the first accumulates mean and M2 chunk by chunk
 * (Chan's pairwise update, robust to a large mean), the second normalizes, applies gamma/beta
 * (reloaded per chunk) and GELU. Statistics and the epilogue run in float for both dtypes.
 */
#include "kernel_operator.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif
#ifndef BUFFER_NUM
#define BUFFER_NUM 2
#endif

struct LayerNormGeluTiling {
    int32_t rows;         // R
    int32_t rowLength;    // H
    int32_t blockRows;    // rows per block
    int32_t rowsPerTile;  // rows per UB tile; 1 when a row is split
    int32_t hTile;        // UB row pitch (H rounded up to 16) when a row fits, else the chunk length
    float eps;
    float invH;  // 1 / H
};

__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }

template <typename T>
class KernelLayerNormGelu {
public:
    __aicore__ inline KernelLayerNormGelu() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR out,
                                const LayerNormGeluTiling& tiling, TPipe* pipe)
    {
        t_ = tiling;
        int32_t rowStart = t_.blockRows * static_cast<int32_t>(GetBlockIdx());
        myRows_ = Min(t_.blockRows, t_.rows - rowStart);
        uint64_t offset = static_cast<uint64_t>(rowStart) * t_.rowLength;
        xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x) + offset, static_cast<uint64_t>(myRows_) * t_.rowLength);
        outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out) + offset, static_cast<uint64_t>(myRows_) * t_.rowLength);
        gammaGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(gamma), t_.rowLength);
        betaGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(beta), t_.rowLength);

        uint32_t tileElems = t_.rowsPerTile * t_.hTile;
        pipe->InitBuffer(inQueueX_, BUFFER_NUM, tileElems * sizeof(T));
        pipe->InitBuffer(outQueueY_, BUFFER_NUM, tileElems * sizeof(T));
        pipe->InitBuffer(gammaBuf_, t_.hTile * sizeof(float));
        pipe->InitBuffer(betaBuf_, t_.hTile * sizeof(float));
        pipe->InitBuffer(sqBuf_, t_.hTile * sizeof(float));
        pipe->InitBuffer(reduceBuf_, (t_.hTile + 63) / 64 * sizeof(float));  // ReduceSum's tmp
        pipe->InitBuffer(sumBuf_, 32);
        pipe->InitBuffer(statsBuf_, t_.rowsPerTile * sizeof(float));
        if constexpr (IsSameType<T, half>::value) {
            pipe->InitBuffer(xfBuf_, tileElems * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        if (t_.hTile >= t_.rowLength) {
            LoadAffine(0, t_.rowLength);
            for (int32_t row = 0; row < myRows_; row += t_.rowsPerTile) {
                int32_t rows = Min(t_.rowsPerTile, myRows_ - row);
                CopyIn(row, 0, rows, t_.rowLength);
                ComputeRows(rows);
                CopyOut(row, 0, rows, t_.rowLength);
            }
            return;
        }
        for (int32_t row = 0; row < myRows_; ++row) {
            float mean = 0.0f, rstd = 0.0f;
            RowStats(row, mean, rstd);
            for (int32_t col = 0; col < t_.rowLength; col += t_.hTile) {
                int32_t count = Min(t_.hTile, t_.rowLength - col);
                CopyIn(row, col, 1, count);
                LoadAffine(col, count);
                ComputeChunk(mean, rstd, count);
                CopyOut(row, col, 1, count);
            }
        }
    }

private:
    // rows x count elements between GM (rows H apart) and UB (rows hTile apart): blocks of one row.
    __aicore__ inline DataCopyExtParams RowCopy(int32_t rows, int32_t count, bool toGm) const
    {
        uint32_t rowBytes = count * sizeof(T);
        uint32_t ubGap = (t_.hTile * sizeof(T) - (rowBytes + 31) / 32 * 32) / 32;
        uint32_t gmGap = (t_.rowLength - count) * sizeof(T);
        return {static_cast<uint16_t>(rows), rowBytes, toGm ? ubGap : gmGap, toGm ? gmGap : ubGap, 0};
    }

    __aicore__ inline void CopyIn(int32_t row, int32_t col, int32_t rows, int32_t count)
    {
        LocalTensor<T> xLocal = inQueueX_.AllocTensor<T>();
        DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
        DataCopyPad(xLocal, xGm_[static_cast<uint64_t>(row) * t_.rowLength + col], RowCopy(rows, count, false), padParams);
        inQueueX_.EnQue(xLocal);
    }

    __aicore__ inline void CopyOut(int32_t row, int32_t col, int32_t rows, int32_t count)
    {
        LocalTensor<T> yLocal = outQueueY_.DeQue<T>();
        DataCopyPad(outGm_[static_cast<uint64_t>(row) * t_.rowLength + col], yLocal, RowCopy(rows, count, true));
        outQueueY_.FreeTensor(yLocal);
    }

    // gamma and beta [col, col + count) as float in gammaBuf / betaBuf.
    __aicore__ inline void LoadAffine(int32_t col, int32_t count)
    {
        PipeBarrier<PIPE_ALL>();  // the previous chunk's vector ops have finished with the buffers
        LoadFloat(gammaBuf_.Get<float>(), gammaGm_[col], count);
        LoadFloat(betaBuf_.Get<float>(), betaGm_[col], count);
    }

    __aicore__ inline void LoadFloat(const LocalTensor<float>& dst, const GlobalTensor<T>& src, int32_t count)
    {
        DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
        DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
        LocalTensor<T> staging = dst.template ReinterpretCast<T>();
        if constexpr (IsSameType<T, half>::value) {
            staging = sqBuf_.Get<T>();
        }
        DataCopyPad(staging, src, copyParams, padParams);
        Sync<HardEvent::MTE2_V>();
        if constexpr (IsSameType<T, half>::value) {
            Cast(dst, staging, RoundMode::CAST_NONE, count);
            PipeBarrier<PIPE_V>();
        }
    }

    template <HardEvent event>
    __aicore__ inline void Sync()
    {
        event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(event));
        SetFlag<event>(id);
        WaitFlag<event>(id);
    }

    // The float view of a dequeued input tile: the tile itself, or its cast in xfBuf.
    __aicore__ inline LocalTensor<float> ToFloat(const LocalTensor<T>& xLocal, int32_t count)
    {
        if constexpr (IsSameType<T, half>::value) {
            LocalTensor<float> xf = xfBuf_.Get<float>();
            Cast(xf, xLocal, RoundMode::CAST_NONE, count);
            return xf;
        } else {
            return xLocal;
        }
    }

    __aicore__ inline float Sum(const LocalTensor<float>& src, int32_t count)
    {
        LocalTensor<float> sum = sumBuf_.Get<float>();
        ReduceSum(sum, src, reduceBuf_.Get<float>(), count);
        Sync<HardEvent::V_S>();
        return sum.GetValue(0);
    }

    // stats[0, n): sums of squared deviations in, 1 / sqrt(M2 / H + eps) out.
    __aicore__ inline void Rstd(const LocalTensor<float>& stats, int32_t n)
    {
        Sync<HardEvent::S_V>();
        Muls(stats, stats, t_.invH, n);
        Adds(stats, stats, t_.eps, n);
        Sqrt(stats, stats, n);
        Reciprocal(stats, stats, n);
        Sync<HardEvent::V_S>();
    }

    __aicore__ inline void Epilogue(const LocalTensor<float>& xf, int32_t count)
    {
        LocalTensor<T> yLocal = outQueueY_.AllocTensor<T>();
        if constexpr (IsSameType<T, half>::value) {
            Gelu(xf, xf, count);
            Cast(yLocal, xf, RoundMode::CAST_NONE, count);
        } else {
            Gelu(yLocal, xf, count);
        }
        outQueueY_.EnQue(yLocal);
    }

    __aicore__ inline void ComputeRows(int32_t rows)
    {
        LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
        LocalTensor<float> xf = ToFloat(xLocal, rows * t_.hTile);
        LocalTensor<float> sq = sqBuf_.Get<float>();
        LocalTensor<float> stats = statsBuf_.Get<float>();
        int32_t h = t_.rowLength;
        for (int32_t r = 0; r < rows; ++r) {
            LocalTensor<float> row = xf[r * t_.hTile];
            Adds(row, row, -Sum(row, h) * t_.invH, h);
            Mul(sq, row, row, h);
            stats.SetValue(r, Sum(sq, h));
        }
        Rstd(stats, rows);
        for (int32_t r = 0; r < rows; ++r) {
            LocalTensor<float> row = xf[r * t_.hTile];
            Muls(row, row, stats.GetValue(r), h);
            FusedMulAdd(row, gammaBuf_.Get<float>(), betaBuf_.Get<float>(), h);  // row * γ + β
        }
        Epilogue(xf, rows * t_.hTile);
        inQueueX_.FreeTensor(xLocal);
    }

    // Pass 1 of a split row: mean and rstd from per-chunk means and M2, combined pairwise.
    __aicore__ inline void RowStats(int32_t row, float& mean, float& rstd)
    {
        LocalTensor<float> sq = sqBuf_.Get<float>();
        float m2 = 0.0f, seen = 0.0f;
        for (int32_t col = 0; col < t_.rowLength; col += t_.hTile) {
            int32_t count = Min(t_.hTile, t_.rowLength - col);
            CopyIn(row, col, 1, count);
            LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
            LocalTensor<float> xf = ToFloat(xLocal, count);
            float n = static_cast<float>(count);
            float chunkMean = Sum(xf, count) / n;
            Adds(sq, xf, -chunkMean, count);
            Mul(sq, sq, sq, count);
            float chunkM2 = Sum(sq, count);
            inQueueX_.FreeTensor(xLocal);
            float delta = chunkMean - mean, total = seen + n;
            mean += delta * n / total;
            m2 += chunkM2 + delta * delta * seen * n / total;
            seen = total;
        }
        LocalTensor<float> stats = statsBuf_.Get<float>();
        stats.SetValue(0, m2);
        Rstd(stats, 1);
        rstd = stats.GetValue(0);
    }

    __aicore__ inline void ComputeChunk(float mean, float rstd, int32_t count)
    {
        LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
        LocalTensor<float> xf = ToFloat(xLocal, count);
        Adds(xf, xf, -mean, count);
        Muls(xf, xf, rstd, count);
        FusedMulAdd(xf, gammaBuf_.Get<float>(), betaBuf_.Get<float>(), count);  // xf * γ + β
        Epilogue(xf, count);
        inQueueX_.FreeTensor(xLocal);
    }

    TQue<TPosition::VECIN, BUFFER_NUM> inQueueX_;
    TQue<TPosition::VECOUT, BUFFER_NUM> outQueueY_;
    TBuf<TPosition::VECCALC> gammaBuf_, betaBuf_, sqBuf_, reduceBuf_, sumBuf_, statsBuf_, xfBuf_;
    GlobalTensor<T> xGm_, gammaGm_, betaGm_, outGm_;
    LayerNormGeluTiling t_;
    int32_t myRows_ = 0;
};

extern "C" __global__ __aicore__ void layernorm_gelu(GM_ADDR x, GM_ADDR gamma, GM_ADDR beta, GM_ADDR out,
                                                     GM_ADDR workspace, LayerNormGeluTiling tiling)
{
    (void)workspace;
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.blockRows * GetBlockIdx() >= tiling.rows) {
        return;
    }
    TPipe pipe;
    KernelLayerNormGelu<DTYPE_X> op;
    op.Init(x, gamma, beta, out, tiling, &pipe);
    op.Process();
}
