/**
 * ScaleReluDropout: y = relu(x * scale) * keep / (1 - p).
 *
 * keep (0 or 1) comes from a counter-based hash of (seed, global element index), so the mask does
 * not depend on the tiling. Each block owns blockLength consecutive elements (the last block takes
 * what is left) and streams them through UB in tiles of tileLength: CopyIn -> Compute -> CopyOut,
 * with BUFFER_NUM buffers per queue so that copies overlap compute.
 */
#include "kernel_operator.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif
#ifndef BUFFER_NUM
#define BUFFER_NUM 2
#endif

struct ScaleReluDropoutTiling {
    int32_t totalLength;  // elements
    int32_t blockLength;  // elements per block, a multiple of 16
    int32_t tileLength;   // elements per UB tile, a multiple of 16
    uint32_t seedMix;     // seed * 0x9E3779B9 (mod 2^32)
    float scale;
    float dropP;
    float keepScale;  // 1 / (1 - dropP)
};

constexpr uint32_t HASH_MUL_1 = 0x85EBCA6Bu;
constexpr uint32_t HASH_MUL_2 = 0xC2B2AE35u;
constexpr float TWO_POW_24 = 16777216.0f;    // 24 hash bits h are uniform in [0, 2^24)
constexpr float TWO_POW_30 = 1073741824.0f;  // scales |h - p * 2^24| (0.375 or more at p = 0.1) past keepScale

template <typename T>
class KernelScaleReluDropout {
public:
    __aicore__ inline KernelScaleReluDropout() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, const ScaleReluDropoutTiling& tiling, TPipe* pipe)
    {
        tiling_ = tiling;
        blockOffset_ = tiling.blockLength * static_cast<int32_t>(GetBlockIdx());
        int32_t rest = tiling.totalLength - blockOffset_;
        blockLength_ = rest < tiling.blockLength ? rest : tiling.blockLength;
        xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x) + blockOffset_, blockLength_);
        yGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(y) + blockOffset_, blockLength_);

        pipe->InitBuffer(inQueueX_, BUFFER_NUM, tiling.tileLength * sizeof(T));
        pipe->InitBuffer(outQueueY_, BUFFER_NUM, tiling.tileLength * sizeof(T));
        pipe->InitBuffer(hashBuf_, tiling.tileLength * sizeof(uint32_t));
        pipe->InitBuffer(maskBuf_, tiling.tileLength * sizeof(float));
        if constexpr (IsSameType<T, half>::value) {
            pipe->InitBuffer(maskCastBuf_, tiling.tileLength * sizeof(T));
        }
    }

    __aicore__ inline void Process()
    {
        for (int32_t offset = 0; offset < blockLength_; offset += tiling_.tileLength) {
            int32_t rest = blockLength_ - offset;
            int32_t count = rest < tiling_.tileLength ? rest : tiling_.tileLength;
            CopyIn(offset, count);
            Compute(blockOffset_ + offset, count);
            CopyOut(offset, count);
        }
    }

private:
    __aicore__ inline void CopyIn(int32_t offset, int32_t count)
    {
        LocalTensor<T> xLocal = inQueueX_.AllocTensor<T>();
        if (count * sizeof(T) % 32 == 0) {
            DataCopy(xLocal, xGm_[offset], count);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
            DataCopyPad(xLocal, xGm_[offset], copyParams, padParams);
        }
        inQueueX_.EnQue(xLocal);
    }

    // keep[i] * keepScale in maskBuf: keepScale when hash(seed, globalOffset + i) / 2^24 > dropP,
    // else 0.0f. The 24 hash bits h are exact in float and h / 2^24 > p <=> h - p * 2^24 > 0, so
    // the mask is the threshold test scaled far past keepScale, then clamped to [0, keepScale].
    __aicore__ inline LocalTensor<float> KeepMask(int32_t globalOffset, int32_t count)
    {
        LocalTensor<uint32_t> hash = hashBuf_.Get<uint32_t>();
        LocalTensor<uint32_t> shifted = maskBuf_.Get<uint32_t>();
        // (index + seedMix) mod 2^32 as the first index: the seed costs no pass of its own.
        uint32_t first = static_cast<uint32_t>(globalOffset) + tiling_.seedMix;
        CreateVecIndex(hash.ReinterpretCast<int32_t>(), static_cast<int32_t>(first), count);
        Muls(hash, hash, HASH_MUL_1, count);
        ShiftRight(shifted, hash, 13u, count);
        Add(hash, hash, shifted, count);
        Muls(hash, hash, HASH_MUL_2, count);
        ShiftRight(shifted, hash, 16u, count);
        Add(hash, hash, shifted, count);
        ShiftRight(hash, hash, 8u, count);

        LocalTensor<float> mask = maskBuf_.Get<float>();
        Cast(mask, hash.ReinterpretCast<int32_t>(), RoundMode::CAST_NONE, count);
        Adds(mask, mask, -tiling_.dropP * TWO_POW_24, count);
        Muls(mask, mask, TWO_POW_30, count);
        Mins(mask, mask, tiling_.keepScale, count);
        Maxs(mask, mask, 0.0f, count);
        return mask;
    }

    __aicore__ inline void Compute(int32_t globalOffset, int32_t count)
    {
        LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
        LocalTensor<T> yLocal = outQueueY_.AllocTensor<T>();
        LocalTensor<float> maskF = KeepMask(globalOffset, count);
        LocalTensor<T> mask;
        if constexpr (IsSameType<T, half>::value) {
            mask = maskCastBuf_.Get<T>();
            Cast(mask, maskF, RoundMode::CAST_NONE, count);
        } else {
            mask = maskF;
        }
        Muls(yLocal, xLocal, static_cast<T>(tiling_.scale), count);
        Relu(yLocal, yLocal, count);
        Mul(yLocal, yLocal, mask, count);
        outQueueY_.EnQue(yLocal);
        inQueueX_.FreeTensor(xLocal);
    }

    __aicore__ inline void CopyOut(int32_t offset, int32_t count)
    {
        LocalTensor<T> yLocal = outQueueY_.DeQue<T>();
        if (count * sizeof(T) % 32 == 0) {
            DataCopy(yGm_[offset], yLocal, count);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
            DataCopyPad(yGm_[offset], yLocal, copyParams);
        }
        outQueueY_.FreeTensor(yLocal);
    }

    TQue<TPosition::VECIN, BUFFER_NUM> inQueueX_;
    TQue<TPosition::VECOUT, BUFFER_NUM> outQueueY_;
    TBuf<TPosition::VECCALC> hashBuf_;
    TBuf<TPosition::VECCALC> maskBuf_;
    TBuf<TPosition::VECCALC> maskCastBuf_;
    GlobalTensor<T> xGm_;
    GlobalTensor<T> yGm_;
    ScaleReluDropoutTiling tiling_;
    int32_t blockOffset_ = 0;
    int32_t blockLength_ = 0;
};

extern "C" __global__ __aicore__ void scale_relu_dropout(GM_ADDR x, GM_ADDR y, GM_ADDR workspace,
                                                         ScaleReluDropoutTiling tiling)
{
    (void)workspace;
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.blockLength * GetBlockIdx() >= tiling.totalLength) {
        return;
    }
    TPipe pipe;
    KernelScaleReluDropout<DTYPE_X> op;
    op.Init(x, y, tiling, &pipe);
    op.Process();
}
