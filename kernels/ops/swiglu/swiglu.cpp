/**
 * SwiGLU: out = silu(g) * u, g and u [T, I] (the projected gate and up inputs), out [T, I].
 *
 * Elementwise over the T*I elements: each block owns blockLength consecutive elements (the last
 * block takes what is left) and streams them through UB in tiles of tileLength, CopyIn -> Compute
 * -> CopyOut with BUFFER_NUM buffers per queue. Compute is the SwiGLU high-level API:
 * SwiGLU(dst, src0, src1, beta) = src0 * swish_beta(src1), here u * silu(g) with beta = 1.
 */
#include "kernel_operator.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif
#ifndef BUFFER_NUM
#define BUFFER_NUM 2
#endif

struct SwigluTiling {
    int32_t totalLength;  // T * I elements
    int32_t blockLength;  // elements per block, a multiple of 16
    int32_t tileLength;   // elements per UB tile, a multiple of 16
};

template <typename T>
class KernelSwiglu {
public:
    __aicore__ inline KernelSwiglu() {}

    __aicore__ inline void Init(GM_ADDR g, GM_ADDR u, GM_ADDR out, const SwigluTiling& tiling, TPipe* pipe)
    {
        tileLength_ = tiling.tileLength;
        int32_t blockOffset = tiling.blockLength * static_cast<int32_t>(GetBlockIdx());
        int32_t rest = tiling.totalLength - blockOffset;
        blockLength_ = rest < tiling.blockLength ? rest : tiling.blockLength;
        gGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(g) + blockOffset, blockLength_);
        uGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(u) + blockOffset, blockLength_);
        outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out) + blockOffset, blockLength_);

        pipe->InitBuffer(inQueueG_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(inQueueU_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(outQueue_, BUFFER_NUM, tileLength_ * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        for (int32_t offset = 0; offset < blockLength_; offset += tileLength_) {
            int32_t rest = blockLength_ - offset;
            int32_t count = rest < tileLength_ ? rest : tileLength_;
            CopyIn(offset, count);
            Compute(count);
            CopyOut(offset, count);
        }
    }

private:
    __aicore__ inline void CopyTile(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int32_t count)
    {
        if (count * sizeof(T) % 32 == 0) {
            DataCopy(dst, src, count);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
            DataCopyPad(dst, src, copyParams, padParams);
        }
    }

    __aicore__ inline void CopyIn(int32_t offset, int32_t count)
    {
        LocalTensor<T> gLocal = inQueueG_.AllocTensor<T>();
        LocalTensor<T> uLocal = inQueueU_.AllocTensor<T>();
        CopyTile(gLocal, gGm_[offset], count);
        CopyTile(uLocal, uGm_[offset], count);
        inQueueG_.EnQue(gLocal);
        inQueueU_.EnQue(uLocal);
    }

    __aicore__ inline void Compute(int32_t count)
    {
        LocalTensor<T> gLocal = inQueueG_.DeQue<T>();
        LocalTensor<T> uLocal = inQueueU_.DeQue<T>();
        LocalTensor<T> outLocal = outQueue_.AllocTensor<T>();
        SwiGLU<T, false>(outLocal, uLocal, gLocal, 1.0f, count);
        outQueue_.EnQue(outLocal);
        inQueueG_.FreeTensor(gLocal);
        inQueueU_.FreeTensor(uLocal);
    }

    __aicore__ inline void CopyOut(int32_t offset, int32_t count)
    {
        LocalTensor<T> outLocal = outQueue_.DeQue<T>();
        if (count * sizeof(T) % 32 == 0) {
            DataCopy(outGm_[offset], outLocal, count);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
            DataCopyPad(outGm_[offset], outLocal, copyParams);
        }
        outQueue_.FreeTensor(outLocal);
    }

    TQue<TPosition::VECIN, BUFFER_NUM> inQueueG_;
    TQue<TPosition::VECIN, BUFFER_NUM> inQueueU_;
    TQue<TPosition::VECOUT, BUFFER_NUM> outQueue_;
    GlobalTensor<T> gGm_;
    GlobalTensor<T> uGm_;
    GlobalTensor<T> outGm_;
    int32_t tileLength_ = 0;
    int32_t blockLength_ = 0;
};

extern "C" __global__ __aicore__ void swiglu(GM_ADDR g, GM_ADDR u, GM_ADDR out, GM_ADDR workspace,
                                             SwigluTiling tiling)
{
    (void)workspace;
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.blockLength * GetBlockIdx() >= tiling.totalLength) {
        return;
    }
    TPipe pipe;
    KernelSwiglu<DTYPE_X> op;
    op.Init(g, u, out, tiling, &pipe);
    op.Process();
}
