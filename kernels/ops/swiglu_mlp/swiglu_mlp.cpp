/**
 * SwigluMlp: out = silu(x * wg) * (x * wu), x [T, H], wg and wu [H, I], out [T, I], ND.
 *
 * Two Matmul objects with one tiling walk the same C blocks in lockstep: per Iterate each gives
 * one baseM x baseN block (gate and up) into UB as float, the vector unit applies SwiGLU in
 * chunks of epiRows rows and copies each chunk out, so neither projection reaches GM. Block b
 * owns the singleCoreM x singleCoreN tile (b % mCores, b / mCores) of out, as in LinearAddGelu.
 */
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif

struct SwigluMlpTiling {
    TCubeTiling cube;  // both objects: M = T, N = I, K = H; usedCoreNum = blockDim
    int32_t epiRows;   // rows of a C block per epilogue pass, 1..baseM
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }

template <typename T>
class KernelSwigluMlp {
public:
    using MatmulT = Matmul<MatmulType<TPosition::GM, CubeFormat::ND, T>, MatmulType<TPosition::GM, CubeFormat::ND, T>,
                           MatmulType<TPosition::VECIN, CubeFormat::ND, float>>;

    __aicore__ inline KernelSwigluMlp() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR wg, GM_ADDR wu, GM_ADDR out, const SwigluMlpTiling& tiling,
                                TPipe* pipe)
    {
        cube_ = tiling.cube;
        epiRows_ = tiling.epiRows;
        int32_t mCores = CeilDiv(cube_.M, cube_.singleCoreM);
        int32_t mIdx = static_cast<int32_t>(GetBlockIdx()) % mCores;
        int32_t nIdx = static_cast<int32_t>(GetBlockIdx()) / mCores;
        tailM_ = Min(cube_.singleCoreM, cube_.M - mIdx * cube_.singleCoreM);
        tailN_ = Min(cube_.singleCoreN, cube_.N - nIdx * cube_.singleCoreN);

        uint64_t aOffset = static_cast<uint64_t>(mIdx) * cube_.singleCoreM * cube_.Ka;
        xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), static_cast<uint64_t>(cube_.M) * cube_.Ka);
        wgGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(wg), static_cast<uint64_t>(cube_.Kb) * cube_.N);
        wuGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(wu), static_cast<uint64_t>(cube_.Kb) * cube_.N);
        outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), static_cast<uint64_t>(cube_.M) * cube_.N);
        xGm_ = xGm_[aOffset];
        wgGm_ = wgGm_[nIdx * cube_.singleCoreN];
        wuGm_ = wuGm_[nIdx * cube_.singleCoreN];
        outGm_ = outGm_[static_cast<uint64_t>(mIdx) * cube_.singleCoreM * cube_.N + nIdx * cube_.singleCoreN];

        pipe->InitBuffer(gQueue_, 1, cube_.baseM * cube_.baseN * sizeof(float));
        pipe->InitBuffer(uQueue_, 1, cube_.baseM * cube_.baseN * sizeof(float));
        pipe->InitBuffer(outQueue_, 2, epiRows_ * cube_.baseN * sizeof(T));
        if constexpr (IsSameType<T, half>::value) {
            // SwiGLU's result in float before the cast: its destination may overlap no source.
            pipe->InitBuffer(swigluBuf_, epiRows_ * cube_.baseN * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        mmG.SetTensorA(xGm_);
        mmG.SetTensorB(wgGm_);
        mmG.SetTail(tailM_, tailN_);
        mmU.SetTensorA(xGm_);
        mmU.SetTensorB(wuGm_);
        mmU.SetTail(tailM_, tailN_);
        int32_t mBlocks = CeilDiv(tailM_, cube_.baseM);
        int32_t nBlocks = CeilDiv(tailN_, cube_.baseN);
        for (int32_t round = 0; mmG.template Iterate<true>(); ++round) {
            mmU.template Iterate<true>();
            int32_t mb = cube_.iterateOrder == 0 ? round % mBlocks : round / nBlocks;
            int32_t nb = cube_.iterateOrder == 0 ? round / mBlocks : round % nBlocks;
            LocalTensor<float> gLocal = gQueue_.AllocTensor<float>();
            mmG.template GetTensorC<true>(gLocal, false, true);  // the block as [baseM, baseN]
            gQueue_.EnQue(gLocal);
            LocalTensor<float> uLocal = uQueue_.AllocTensor<float>();
            mmU.template GetTensorC<true>(uLocal, false, true);
            uQueue_.EnQue(uLocal);
            Epilogue(mb, nb, Min(cube_.baseM, tailM_ - mb * cube_.baseM), Min(cube_.baseN, tailN_ - nb * cube_.baseN));
        }
        mmG.End();
        mmU.End();
    }

    MatmulT mmG;
    MatmulT mmU;

private:
    // u * silu(g) on the C blocks, epiRows rows at a time, each chunk copied out to GM.
    __aicore__ inline void Epilogue(int32_t mb, int32_t nb, int32_t curM, int32_t curN)
    {
        LocalTensor<float> gLocal = gQueue_.DeQue<float>();
        LocalTensor<float> uLocal = uQueue_.DeQue<float>();
        for (int32_t row0 = 0; row0 < curM; row0 += epiRows_) {
            int32_t rows = Min(epiRows_, curM - row0);
            uint32_t count = rows * cube_.baseN;
            LocalTensor<float> gChunk = gLocal[row0 * cube_.baseN];
            LocalTensor<float> uChunk = uLocal[row0 * cube_.baseN];
            LocalTensor<T> outLocal = outQueue_.AllocTensor<T>();
            if constexpr (IsSameType<T, half>::value) {
                LocalTensor<float> result = swigluBuf_.Get<float>();
                SwiGLU<float, false>(result, uChunk, gChunk, 1.0f, count);
                Cast(outLocal, result, RoundMode::CAST_NONE, count);
            } else {
                SwiGLU<float, false>(outLocal, uChunk, gChunk, 1.0f, count);
            }
            outQueue_.EnQue(outLocal);
            CopyOut(mb * cube_.baseM + row0, nb * cube_.baseN, rows, curN);
        }
        gQueue_.FreeTensor(gLocal);
        uQueue_.FreeTensor(uLocal);
    }

    // rows x curN from UB (rows baseN apart) to out[row][col...]; UB stride in 32 B blocks.
    __aicore__ inline void CopyOut(int32_t row, int32_t col, int32_t rows, int32_t curN)
    {
        LocalTensor<T> outLocal = outQueue_.DeQue<T>();
        uint32_t rowBytes = curN * sizeof(T);
        uint32_t ubGap = (cube_.baseN * sizeof(T) - (rowBytes + 31) / 32 * 32) / 32;
        uint32_t gmGap = (cube_.N - curN) * sizeof(T);
        DataCopyExtParams copyParams{static_cast<uint16_t>(rows), rowBytes, ubGap, gmGap, 0};
        DataCopyPad(outGm_[static_cast<uint64_t>(row) * cube_.N + col], outLocal, copyParams);
        outQueue_.FreeTensor(outLocal);
    }

    TQue<TPosition::VECIN, 1> gQueue_;
    TQue<TPosition::VECIN, 1> uQueue_;
    TQue<TPosition::VECOUT, 2> outQueue_;
    TBuf<TPosition::VECCALC> swigluBuf_;
    GlobalTensor<T> xGm_;
    GlobalTensor<T> wgGm_;
    GlobalTensor<T> wuGm_;
    GlobalTensor<T> outGm_;
    TCubeTiling cube_;
    int32_t epiRows_ = 1;
    int32_t tailM_ = 0;
    int32_t tailN_ = 0;
};

extern "C" __global__ __aicore__ void swiglu_mlp(GM_ADDR x, GM_ADDR wg, GM_ADDR wu, GM_ADDR out, GM_ADDR workspace,
                                                 SwigluMlpTiling tiling)
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
    KernelSwigluMlp<DTYPE_X> op;
    op.Init(x, wg, wu, out, tiling, &pipe);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), op.mmG, &tiling.cube, op.mmU, &tiling.cube);
    op.Process();
}
