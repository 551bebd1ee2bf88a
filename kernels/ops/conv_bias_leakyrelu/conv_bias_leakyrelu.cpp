/**
 * ConvBiasLeakyRelu: out = LeakyReLU(conv2d(x, w, stride, pad) + bias), NCHW: x [N, C, H, W],
 * w [K, C, R, S], bias [K], out [N, K, OH, OW]; per image out[n] (K x OH*OW) = w (K x C*R*S) * col.
 *
 * Block b owns output pixels [b * singleCoreN, +singleCoreN) of every image and all K channels.
 * Per image it first writes its own columns of col (im2col) to a private GM workspace region
 * (singleCoreN apart; blocks never share a region, so no cross-core sync): per colTile pixels it
 * computes the UB byte offsets of every (r, s) tap once (padding taps point at a zero slot), then
 * for each channel loads the input rows those pixels touch and Gathers R*S rows of col. Then the
 * Matmul walks w * col block by block into UB; the vector unit adds the bias per row (channel),
 * applies LeakyReLU in place and copies epiRows rows at a time to out.
 */
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif

struct ConvBiasLeakyReluTiling {
    TCubeTiling cube;  // M = K, N = singleCoreN (col row pitch), Ka = Kb = C*R*S; usedCoreNum = blockDim
    int32_t batch, channels, height, width, kernelH, kernelW, stride, pad, outH, outW;
    int32_t colTile;  // output pixels per im2col pass, a multiple of 16
    int32_t winRows;  // input rows a colTile of pixels can touch
    int32_t epiRows;  // rows of a C block per epilogue pass
    float alpha;
};

constexpr int32_t ZERO_SLOT = 16;  // zeroed elements after the (16-aligned) input window, for padding taps

__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }
__aicore__ inline int32_t Max(int32_t a, int32_t b) { return a > b ? a : b; }

template <typename T>
class KernelConvBiasLeakyRelu {
public:
    using MatmulT = Matmul<MatmulType<TPosition::GM, CubeFormat::ND, T>, MatmulType<TPosition::GM, CubeFormat::ND, T>,
                           MatmulType<TPosition::VECIN, CubeFormat::ND, float>>;

    __aicore__ inline KernelConvBiasLeakyRelu() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR w, GM_ADDR bias, GM_ADDR out, GM_ADDR workspace,
                                const ConvBiasLeakyReluTiling& tiling, TPipe* pipe)
    {
        t_ = tiling;
        cube_ = tiling.cube;
        taps_ = t_.kernelH * t_.kernelW;
        winPad_ = (t_.winRows * t_.width + ZERO_SLOT - 1) / ZERO_SLOT * ZERO_SLOT;
        pixels_ = t_.outH * t_.outW;
        p0_ = static_cast<int32_t>(GetBlockIdx()) * cube_.singleCoreN;
        tailN_ = Min(cube_.singleCoreN, pixels_ - p0_);
        uint64_t plane = static_cast<uint64_t>(t_.height) * t_.width;
        uint64_t colElems = static_cast<uint64_t>(cube_.Kb) * cube_.singleCoreN;
        xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), t_.batch * t_.channels * plane);
        wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(w), static_cast<uint64_t>(cube_.M) * cube_.Ka);
        biasGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(bias), cube_.M);
        outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), static_cast<uint64_t>(t_.batch) * cube_.M * pixels_);
        colGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(GetUserWorkspace(workspace)) + GetBlockIdx() * colElems,
                               colElems);

        pipe->InitBuffer(winQueue_, 2, (winPad_ + ZERO_SLOT) * sizeof(T));
        pipe->InitBuffer(colQueue_, 2, taps_ * t_.colTile * sizeof(T));
        pipe->InitBuffer(offBuf_, taps_ * t_.colTile * sizeof(uint32_t));
        pipe->InitBuffer(cQueue_, 1, cube_.baseM * cube_.baseN * sizeof(float));
        pipe->InitBuffer(biasBuf_, cube_.M * sizeof(float));
        if constexpr (IsSameType<T, half>::value) {
            pipe->InitBuffer(biasCastBuf_, cube_.M * sizeof(T));
        }
        pipe->InitBuffer(outQueue_, 2, t_.epiRows * cube_.baseN * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        LoadBias();
        for (int32_t n = 0; n < t_.batch; ++n) {
            for (int32_t pc = 0; pc < tailN_; pc += t_.colTile) {
                Im2col(n, pc, Min(t_.colTile, tailN_ - pc));
            }
            PipeBarrier<PIPE_ALL>();  // col is in GM before the cube reads it
            mm.SetTensorA(wGm_);
            mm.SetTensorB(colGm_);
            mm.SetTail(cube_.M, tailN_);
            int32_t mBlocks = (cube_.M + cube_.baseM - 1) / cube_.baseM;
            int32_t nBlocks = (tailN_ + cube_.baseN - 1) / cube_.baseN;
            for (int32_t round = 0; mm.template Iterate<true>(); ++round) {
                int32_t mb = cube_.iterateOrder == 0 ? round % mBlocks : round / nBlocks;
                int32_t nb = cube_.iterateOrder == 0 ? round / mBlocks : round % nBlocks;
                LocalTensor<float> cLocal = cQueue_.AllocTensor<float>();
                mm.template GetTensorC<true>(cLocal, false, true);  // the block as [baseM, baseN]
                cQueue_.EnQue(cLocal);
                Epilogue(n, mb, nb, Min(cube_.baseM, cube_.M - mb * cube_.baseM), Min(cube_.baseN, tailN_ - nb * cube_.baseN));
            }
            mm.End();
        }
    }

    MatmulT mm;

private:
    template <HardEvent event>
    __aicore__ inline void Sync()
    {
        event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(event));
        SetFlag<event>(id);
        WaitFlag<event>(id);
    }

    __aicore__ inline void LoadBias()
    {
        LocalTensor<float> biasF = biasBuf_.Get<float>();
        LocalTensor<T> staging = biasF.template ReinterpretCast<T>();
        if constexpr (IsSameType<T, half>::value) {
            staging = biasCastBuf_.Get<T>();
        }
        DataCopyExtParams copyParams{1, static_cast<uint32_t>(cube_.M * sizeof(T)), 0, 0, 0};
        DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
        DataCopyPad(staging, biasGm_, copyParams, padParams);
        Sync<HardEvent::MTE2_V>();
        if constexpr (IsSameType<T, half>::value) {
            Cast(biasF, staging, RoundMode::CAST_NONE, cube_.M);
        }
        Sync<HardEvent::V_S>();
    }

    // col rows (c, r, s) for pixels [p0 + pc, +count) of image n, into this block's col region.
    __aicore__ inline void Im2col(int32_t n, int32_t pc, int32_t count)
    {
        int32_t first = p0_ + pc;
        int32_t ohFirst = first / t_.outW, ohLast = (first + count - 1) / t_.outW;
        int32_t ih0 = Max(0, ohFirst * t_.stride - t_.pad);
        int32_t ih1 = Min(t_.height - 1, ohLast * t_.stride - t_.pad + t_.kernelH - 1);
        int32_t rows = ih1 - ih0 + 1;  // may be <= 0 when every tap is padding
        uint32_t zeroOffset = winPad_ * sizeof(T);
        LocalTensor<uint32_t> offsets = offBuf_.Get<uint32_t>();
        Sync<HardEvent::V_S>();  // the previous pass's Gathers have read the offsets
        // The scalar unit is slow at division: one per pixel, none per tap.
        for (int32_t j = 0, oh = first / t_.outW, ow = first % t_.outW; j < count; ++j) {
            int32_t tap = 0;
            for (int32_t r = 0; r < t_.kernelH; ++r) {
                int32_t ih = oh * t_.stride - t_.pad + r;
                bool rowInside = ih >= 0 && ih < t_.height;
                for (int32_t s = 0; s < t_.kernelW; ++s, ++tap) {
                    int32_t iw = ow * t_.stride - t_.pad + s;
                    bool inside = rowInside && iw >= 0 && iw < t_.width;
                    offsets.SetValue(tap * t_.colTile + j, inside ? ((ih - ih0) * t_.width + iw) * sizeof(T) : zeroOffset);
                }
            }
            if (++ow == t_.outW) {
                ow = 0;
                ++oh;
            }
        }
        Sync<HardEvent::S_V>();
        uint64_t plane = static_cast<uint64_t>(t_.height) * t_.width;
        for (int32_t c = 0; c < t_.channels; ++c) {
            LocalTensor<T> win = winQueue_.AllocTensor<T>();
            if (rows > 0) {
                DataCopyExtParams copyParams{1, static_cast<uint32_t>(rows * t_.width * sizeof(T)), 0, 0, 0};
                DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
                uint64_t src = (static_cast<uint64_t>(n) * t_.channels + c) * plane + static_cast<uint64_t>(ih0) * t_.width;
                DataCopyPad(win, xGm_[src], copyParams, padParams);
            }
            Duplicate(win[winPad_], static_cast<T>(0), ZERO_SLOT);
            winQueue_.EnQue(win);
            win = winQueue_.DeQue<T>();
            LocalTensor<T> col = colQueue_.AllocTensor<T>();
            for (int32_t tap = 0; tap < taps_; ++tap) {
                Gather(col[tap * t_.colTile], win, offsets[tap * t_.colTile], 0u, static_cast<uint32_t>(count));
            }
            colQueue_.EnQue(col);
            winQueue_.FreeTensor(win);
            col = colQueue_.DeQue<T>();
            uint32_t rowBytes = count * sizeof(T);
            uint32_t ubGap = (t_.colTile * sizeof(T) - (rowBytes + 31) / 32 * 32) / 32;
            uint32_t gmGap = (cube_.singleCoreN - count) * sizeof(T);
            DataCopyExtParams copyParams{static_cast<uint16_t>(taps_), rowBytes, ubGap, gmGap, 0};
            DataCopyPad(colGm_[static_cast<uint64_t>(c) * taps_ * cube_.singleCoreN + pc], col, copyParams);
            colQueue_.FreeTensor(col);
        }
    }

    // bias per row (output channel) and LeakyReLU on the C block, epiRows rows per copy out.
    __aicore__ inline void Epilogue(int32_t n, int32_t mb, int32_t nb, int32_t curM, int32_t curN)
    {
        LocalTensor<float> cLocal = cQueue_.DeQue<float>();
        LocalTensor<float> biasF = biasBuf_.Get<float>();
        for (int32_t row0 = 0; row0 < curM; row0 += t_.epiRows) {
            int32_t rows = Min(t_.epiRows, curM - row0);
            LocalTensor<float> chunk = cLocal[row0 * cube_.baseN];
            for (int32_t r = 0; r < rows; ++r) {
                float b = biasF.GetValue(mb * cube_.baseM + row0 + r);
                Adds(chunk[r * cube_.baseN], chunk[r * cube_.baseN], b, curN);
            }
            LocalTensor<T> outLocal = outQueue_.AllocTensor<T>();
            if constexpr (IsSameType<T, half>::value) {
                LeakyRelu(chunk, chunk, t_.alpha, rows * cube_.baseN);
                Cast(outLocal, chunk, RoundMode::CAST_NONE, rows * cube_.baseN);
            } else {
                LeakyRelu(outLocal, chunk, t_.alpha, rows * cube_.baseN);
            }
            outQueue_.EnQue(outLocal);
            outLocal = outQueue_.DeQue<T>();
            uint32_t rowBytes = curN * sizeof(T);
            uint32_t ubGap = (cube_.baseN * sizeof(T) - (rowBytes + 31) / 32 * 32) / 32;
            uint32_t gmGap = (pixels_ - curN) * sizeof(T);
            uint64_t dst = (static_cast<uint64_t>(n) * cube_.M + mb * cube_.baseM + row0) * pixels_ + p0_ + nb * cube_.baseN;
            DataCopyExtParams copyParams{static_cast<uint16_t>(rows), rowBytes, ubGap, gmGap, 0};
            DataCopyPad(outGm_[dst], outLocal, copyParams);
            outQueue_.FreeTensor(outLocal);
        }
        cQueue_.FreeTensor(cLocal);
    }

    TQue<TPosition::VECIN, 2> winQueue_;
    TQue<TPosition::VECOUT, 2> colQueue_;
    TQue<TPosition::VECIN, 1> cQueue_;
    TQue<TPosition::VECOUT, 2> outQueue_;
    TBuf<TPosition::VECCALC> offBuf_, biasBuf_, biasCastBuf_;
    GlobalTensor<T> xGm_, wGm_, biasGm_, outGm_, colGm_;
    ConvBiasLeakyReluTiling t_;
    TCubeTiling cube_;
    int32_t taps_ = 1, winPad_ = 0, pixels_ = 1, p0_ = 0, tailN_ = 0;
};

extern "C" __global__ __aicore__ void conv_bias_leakyrelu(GM_ADDR x, GM_ADDR w, GM_ADDR bias, GM_ADDR out,
                                                          GM_ADDR workspace, ConvBiasLeakyReluTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if (GetBlockIdx() >= tiling.cube.usedCoreNum) {
        return;
    }
    SetSysWorkspace(workspace);
    if (GetSysWorkSpacePtr() == nullptr) {
        return;
    }
    TPipe pipe;
    KernelConvBiasLeakyRelu<DTYPE_X> op;
    op.Init(x, w, bias, out, workspace, tiling, &pipe);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), op.mm, &tiling.cube);
    op.Process();
}
