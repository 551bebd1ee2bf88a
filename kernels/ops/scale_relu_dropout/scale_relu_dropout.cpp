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
    int32_t tileLength;   // elements per UB tile, a multiple of 64 (whole 256 B float repeats)
    uint32_t seedMix;     // seed * 0x9E3779B9 (mod 2^32)
    float scale;
    float dropP;
    float keepScale;  // 1 / (1 - dropP)
};

constexpr uint32_t HASH_MUL_1 = 0x85EBCA6Bu;
constexpr uint32_t HASH_MUL_2 = 0xC2B2AE35u;
constexpr float TWO_POW_24 = 16777216.0f;    // 24 hash bits h are uniform in [0, 2^24)

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
        pipe->InitBuffer(scratchBuf_, tiling.tileLength * sizeof(float));
        pipe->InitBuffer(keepBuf_, tiling.tileLength / 8);  // one bit per element
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

    // Bit i of keepBuf: hash(seed, globalOffset + i) / 2^24 > dropP. The 24 hash bits h are exact
    // in float, and h / 2^24 > p <=> h > p * 2^24 (a power-of-two scaling, also exact).
    __aicore__ inline LocalTensor<uint8_t> KeepBits(int32_t globalOffset, int32_t count)
    {
        LocalTensor<uint32_t> hash = hashBuf_.Get<uint32_t>();
        LocalTensor<uint32_t> shifted = scratchBuf_.Get<uint32_t>();
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

        LocalTensor<float> u = scratchBuf_.Get<float>();
        Cast(u, hash.ReinterpretCast<int32_t>(), RoundMode::CAST_NONE, count);
        LocalTensor<uint8_t> keep = keepBuf_.Get<uint8_t>();
        CompareScalar(keep, u, tiling_.dropP * TWO_POW_24, CMPMODE::GT, count);
        return keep;
    }

    // y = keep ? relu(x * scale * keepScale) : 0. The whole tile is computed over `count` rounded
    // up to whole 256 B repeats (CompareScalar's unit; tileLength is a multiple of that): the
    // elements past the data are never copied out.
    __aicore__ inline void Compute(int32_t globalOffset, int32_t count)
    {
        constexpr int32_t repeat = 256 / sizeof(float);  // the float compare sets the unit
        int32_t padded = (count + repeat - 1) / repeat * repeat;
        LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
        LocalTensor<T> yLocal = outQueueY_.AllocTensor<T>();
        LocalTensor<uint8_t> keep = KeepBits(globalOffset, padded);
        Muls(yLocal, xLocal, static_cast<T>(tiling_.scale * tiling_.keepScale), padded);
        Relu(yLocal, yLocal, padded);
        Select(yLocal, keep, yLocal, static_cast<T>(0.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, padded);
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
    TBuf<TPosition::VECCALC> scratchBuf_;
    TBuf<TPosition::VECCALC> keepBuf_;
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
