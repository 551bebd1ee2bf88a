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
    int32_t tileLength;   // elements per UB tile, a multiple of 128 (whole 256 B repeats of half too)
    uint32_t seedMix;     // seed * 0x9E3779B9 (mod 2^32)
    float scale;
    float dropP;
    float keepScale;  // 1 / (1 - dropP)
};

constexpr uint32_t HASH_MUL = 0x85EBCA6Bu;
constexpr float TWO_POW_31 = 2147483648.0f;
constexpr float TWO_POW_32 = 4294967296.0f;

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
        pipe->InitBuffer(indexBuf_, tiling.tileLength * sizeof(int32_t));
        pipe->InitBuffer(keepBuf_, tiling.tileLength / 8);  // one bit per element
        pipe->InitBuffer(positiveBuf_, tiling.tileLength / 8);

        // i * HASH_MUL for the elements of a tile, once: a tile's first hash step is then one Adds
        // ((first + i) * HASH_MUL = first * HASH_MUL + i * HASH_MUL, mod 2^32).
        LocalTensor<int32_t> index = indexBuf_.Get<int32_t>();
        CreateVecIndex(index, 0, tiling.tileLength);
        Muls(index, index, static_cast<int32_t>(HASH_MUL), tiling.tileLength);
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

    // Bit i of keepBuf: the hash of (seed, globalOffset + i), read as an int32 h uniform in
    // [-2^31, 2^31), is above -2^31 + p * 2^32, which it is with probability 1 - p.
    //
    // The vector unit has integer multiply, add and shift but no 32-bit XOR, and a hash built from
    // multiplies and added shifts alone is nearly linear in the index: consecutive elements then
    // get strongly correlated keep bits (such a mask never dropped two neighbours). Squaring is the
    // nonlinear step: two rounds of "fold the high half down, square" pass serial tests of keep
    // patterns over windows of up to 12 neighbours (tests/kernels/ops/test_specs.py).
    __aicore__ inline LocalTensor<uint8_t> KeepBits(int32_t globalOffset, int32_t count)
    {
        LocalTensor<uint32_t> hash = hashBuf_.Get<uint32_t>();
        LocalTensor<uint32_t> shifted = scratchBuf_.Get<uint32_t>();
        // (index + seedMix) mod 2^32 as the first index: the seed costs no pass of its own.
        uint32_t first = static_cast<uint32_t>(globalOffset) + tiling_.seedMix;
        // Multiplies and adds run on int32 (the vector unit's integer arithmetic), logical shifts
        // on uint32; the low 32 bits of a sum or product are the same either way.
        LocalTensor<int32_t> hashInt = hash.ReinterpretCast<int32_t>();
        Adds(hashInt, indexBuf_.Get<int32_t>(), static_cast<int32_t>(first * HASH_MUL), count);
        for (int32_t round = 0; round < 2; ++round) {
            ShiftRight(shifted, hash, 16u, count);
            Add(hashInt, hashInt, shifted.ReinterpretCast<int32_t>(), count);
            Mul(hashInt, hashInt, hashInt, count);
        }

        // int32 -> float rounds to 24 significant bits; the reference rounds the same way.
        LocalTensor<float> u = scratchBuf_.Get<float>();
        Cast(u, hashInt, RoundMode::CAST_NONE, count);
        LocalTensor<uint8_t> keep = keepBuf_.Get<uint8_t>();
        CompareScalar(keep, u, tiling_.dropP * TWO_POW_32 - TWO_POW_31, CMPMODE::GT, count);
        return keep;
    }

    // y = keep && (x * s > 0 || x is NaN) ? x * s : 0 with s = scale * keepScale: the ReLU is a
    // bit mask ANDed into the keep bits (one compare that reads the tile, where Relu would read
    // and write it). A NaN compares false, so its bit comes from x != x: relu(NaN) stays NaN, as
    // numpy's maximum and PyTorch's relu keep it, rather than hiding it as a 0.
    // The whole tile is computed over `count` rounded up to whole 256 B repeats of float and half
    // (the compares' unit; tileLength is a multiple of that): the elements past the data are never
    // copied out.
    __aicore__ inline void Compute(int32_t globalOffset, int32_t count)
    {
        constexpr int32_t repeat = 256 / sizeof(half);
        int32_t padded = (count + repeat - 1) / repeat * repeat;
        LocalTensor<T> xLocal = inQueueX_.DeQue<T>();
        LocalTensor<T> yLocal = outQueueY_.AllocTensor<T>();
        LocalTensor<uint8_t> keep = KeepBits(globalOffset, padded);
        float s = tiling_.scale * tiling_.keepScale;
        LocalTensor<uint8_t> positive = positiveBuf_.Get<uint8_t>();
        CompareScalar(positive, xLocal, static_cast<T>(0.0f), s < 0.0f ? CMPMODE::LT : CMPMODE::GT, padded);
        // The hash's scratch is free again once KeepBits has compared it.
        LocalTensor<uint8_t> isNan = scratchBuf_.Get<uint8_t>();
        Compare(isNan, xLocal, xLocal, CMPMODE::NE, padded);
        LocalTensor<uint16_t> positive16 = positive.ReinterpretCast<uint16_t>();
        Or(positive16, positive16, isNan.ReinterpretCast<uint16_t>(), padded / 16);
        LocalTensor<uint16_t> keep16 = keep.ReinterpretCast<uint16_t>();
        And(keep16, keep16, positive16, padded / 16);
        Muls(yLocal, xLocal, static_cast<T>(s), padded);
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
    TBuf<TPosition::VECCALC> indexBuf_;
    TBuf<TPosition::VECCALC> keepBuf_;
    TBuf<TPosition::VECCALC> positiveBuf_;
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
