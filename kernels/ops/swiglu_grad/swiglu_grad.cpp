/**
 * SwiGLU backward: given dout, g and u [T, I] of out = silu(g) * u, with s = sigmoid(g),
 *   du = dout * silu(g)
 *   dg = dout * u * s * (1 + g * (1 - s))
 * both [T, I], in one pass: each input is read from GM once and both outputs written once.
 *
 * Elementwise over the T*I elements, tiled as swiglu's forward: each block owns blockLength
 * consecutive elements (the last block takes what is left) and streams them through UB in tiles of
 * tileLength, CopyIn -> Compute -> CopyOut with BUFFER_NUM buffers per queue. Compute needs no
 * scratch buffer: g's tile is dead once silu(g) is formed, so it holds 1 + g * (1 - s), written
 * as 1 + g - silu(g) to reuse silu(g) rather than form 1 - s.
 */
#include "kernel_operator.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif
#ifndef BUFFER_NUM
#define BUFFER_NUM 2
#endif

struct SwigluGradTiling {
    int32_t totalLength;  // T * I elements
    int32_t blockLength;  // elements per block, a multiple of 16
    int32_t tileLength;   // elements per UB tile, a multiple of 16
};

template <typename T>
class KernelSwigluGrad {
public:
    __aicore__ inline KernelSwigluGrad() {}

    __aicore__ inline void Init(GM_ADDR dout, GM_ADDR g, GM_ADDR u, GM_ADDR dg, GM_ADDR du,
                                const SwigluGradTiling& tiling, TPipe* pipe)
    {
        tileLength_ = tiling.tileLength;
        int32_t blockOffset = tiling.blockLength * static_cast<int32_t>(GetBlockIdx());
        int32_t rest = tiling.totalLength - blockOffset;
        blockLength_ = rest < tiling.blockLength ? rest : tiling.blockLength;
        doutGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dout) + blockOffset, blockLength_);
        gGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(g) + blockOffset, blockLength_);
        uGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(u) + blockOffset, blockLength_);
        dgGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(dg) + blockOffset, blockLength_);
        duGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(du) + blockOffset, blockLength_);

        pipe->InitBuffer(inQueueDout_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(inQueueG_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(inQueueU_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(outQueueDg_, BUFFER_NUM, tileLength_ * sizeof(T));
        pipe->InitBuffer(outQueueDu_, BUFFER_NUM, tileLength_ * sizeof(T));
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

    __aicore__ inline void StoreTile(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int32_t count)
    {
        if (count * sizeof(T) % 32 == 0) {
            DataCopy(dst, src, count);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(count * sizeof(T)), 0, 0, 0};
            DataCopyPad(dst, src, copyParams);
        }
    }

    __aicore__ inline void CopyIn(int32_t offset, int32_t count)
    {
        LocalTensor<T> doutLocal = inQueueDout_.AllocTensor<T>();
        LocalTensor<T> gLocal = inQueueG_.AllocTensor<T>();
        LocalTensor<T> uLocal = inQueueU_.AllocTensor<T>();
        CopyTile(doutLocal, doutGm_[offset], count);
        CopyTile(gLocal, gGm_[offset], count);
        CopyTile(uLocal, uGm_[offset], count);
        inQueueDout_.EnQue(doutLocal);
        inQueueG_.EnQue(gLocal);
        inQueueU_.EnQue(uLocal);
    }

    __aicore__ inline void Compute(int32_t count)
    {
        LocalTensor<T> doutLocal = inQueueDout_.DeQue<T>();
        LocalTensor<T> gLocal = inQueueG_.DeQue<T>();
        LocalTensor<T> uLocal = inQueueU_.DeQue<T>();
        LocalTensor<T> dgLocal = outQueueDg_.AllocTensor<T>();
        LocalTensor<T> duLocal = outQueueDu_.AllocTensor<T>();
        Sigmoid<T, false>(dgLocal, gLocal, count);         // dg = s
        Mul(duLocal, gLocal, dgLocal, count);              // du = silu(g)
        Sub(gLocal, gLocal, duLocal, count);               // g := g * (1 - s)
        Adds(gLocal, gLocal, static_cast<T>(1), count);    // g := 1 + g * (1 - s)
        Mul(dgLocal, dgLocal, gLocal, count);              // dg = silu'(g)
        Mul(uLocal, uLocal, doutLocal, count);             // u := dout * u
        Mul(dgLocal, dgLocal, uLocal, count);              // dg = dout * u * silu'(g)
        Mul(duLocal, duLocal, doutLocal, count);           // du = dout * silu(g)
        outQueueDg_.EnQue(dgLocal);
        outQueueDu_.EnQue(duLocal);
        inQueueDout_.FreeTensor(doutLocal);
        inQueueG_.FreeTensor(gLocal);
        inQueueU_.FreeTensor(uLocal);
    }

    __aicore__ inline void CopyOut(int32_t offset, int32_t count)
    {
        LocalTensor<T> dgLocal = outQueueDg_.DeQue<T>();
        LocalTensor<T> duLocal = outQueueDu_.DeQue<T>();
        StoreTile(dgGm_[offset], dgLocal, count);
        StoreTile(duGm_[offset], duLocal, count);
        outQueueDg_.FreeTensor(dgLocal);
        outQueueDu_.FreeTensor(duLocal);
    }

    TQue<TPosition::VECIN, BUFFER_NUM> inQueueDout_;
    TQue<TPosition::VECIN, BUFFER_NUM> inQueueG_;
    TQue<TPosition::VECIN, BUFFER_NUM> inQueueU_;
    TQue<TPosition::VECOUT, BUFFER_NUM> outQueueDg_;
    TQue<TPosition::VECOUT, BUFFER_NUM> outQueueDu_;
    GlobalTensor<T> doutGm_;
    GlobalTensor<T> gGm_;
    GlobalTensor<T> uGm_;
    GlobalTensor<T> dgGm_;
    GlobalTensor<T> duGm_;
    int32_t tileLength_ = 0;
    int32_t blockLength_ = 0;
};

extern "C" __global__ __aicore__ void swiglu_grad(GM_ADDR dout, GM_ADDR g, GM_ADDR u, GM_ADDR dg,
                                                  GM_ADDR du, GM_ADDR workspace, SwigluGradTiling tiling)
{
    (void)workspace;
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.blockLength * GetBlockIdx() >= tiling.totalLength) {
        return;
    }
    TPipe pipe;
    KernelSwigluGrad<DTYPE_X> op;
    op.Init(dout, g, u, dg, du, tiling, &pipe);
    op.Process();
}
