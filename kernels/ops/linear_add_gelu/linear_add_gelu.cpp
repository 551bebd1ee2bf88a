/**
 * LinearAddGelu: out = GELU_tanh(x * w + bias), x [M, K], w [K, N], bias [N], out [M, N], ND.
 *
 * Follows the vendor MatmulLeakyRelu sample: the cube computes one baseM x baseN block of C per
 * Iterate into UB as float, the vector unit adds the bias and applies GELU in chunks of epiRows
 * rows, and each chunk goes out to GM. Block b owns the singleCoreM x singleCoreN tile
 * (b % mCores, b / mCores) of out; edge blocks shrink it with SetTail.
 */
#include "kernel_operator.h"
#include "lib/matmul_intf.h"

using namespace AscendC;

#ifndef DTYPE_X
#define DTYPE_X float
#endif

struct LinearAddGeluTiling {
    TCubeTiling cube;  // usedCoreNum = ceil(M / singleCoreM) * ceil(N / singleCoreN) = blockDim
    int32_t epiRows;   // rows of a C block per epilogue pass, 1..baseM
};

__aicore__ inline int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }
__aicore__ inline int32_t Min(int32_t a, int32_t b) { return a < b ? a : b; }

template <typename T>
class KernelLinearAddGelu {
public:
    using MatmulT = Matmul<MatmulType<TPosition::GM, CubeFormat::ND, T>, MatmulType<TPosition::GM, CubeFormat::ND, T>,
                           MatmulType<TPosition::VECIN, CubeFormat::ND, float>,
                           MatmulType<TPosition::GM, CubeFormat::ND, T>>;

    __aicore__ inline KernelLinearAddGelu() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR w, GM_ADDR bias, GM_ADDR out,
                                const LinearAddGeluTiling& tiling, TPipe* pipe)
    {
        cube_ = tiling.cube;
        epiRows_ = tiling.epiRows;
        int32_t mCores = CeilDiv(cube_.M, cube_.singleCoreM);
        int32_t mIdx = static_cast<int32_t>(GetBlockIdx()) % mCores;
        int32_t nIdx = static_cast<int32_t>(GetBlockIdx()) / mCores;
        tailM_ = Min(cube_.singleCoreM, cube_.M - mIdx * cube_.singleCoreM);
        tailN_ = Min(cube_.singleCoreN, cube_.N - nIdx * cube_.singleCoreN);

        xGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), static_cast<uint64_t>(cube_.M) * cube_.Ka);
        wGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(w), static_cast<uint64_t>(cube_.Kb) * cube_.N);
        biasGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(bias), cube_.N);
        outGm_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(out), static_cast<uint64_t>(cube_.M) * cube_.N);
        xGm_ = xGm_[static_cast<uint64_t>(mIdx) * cube_.singleCoreM * cube_.Ka];
        wGm_ = wGm_[nIdx * cube_.singleCoreN];
        biasGm_ = biasGm_[nIdx * cube_.singleCoreN];
        outGm_ = outGm_[static_cast<uint64_t>(mIdx) * cube_.singleCoreM * cube_.N + nIdx * cube_.singleCoreN];

        pipe->InitBuffer(cQueue_, 1, cube_.baseM * cube_.baseN * sizeof(float));
        pipe->InitBuffer(biasBuf_, cube_.baseN * sizeof(float));
        if constexpr (IsSameType<T, half>::value) {
            pipe->InitBuffer(biasCastBuf_, cube_.baseN * sizeof(T));
        }
        pipe->InitBuffer(outQueue_, 2, epiRows_ * cube_.baseN * sizeof(T));
    }

    __aicore__ inline void Process()
    {
        mm.SetTensorA(xGm_);
        mm.SetTensorB(wGm_);
        mm.SetTail(tailM_, tailN_);
        int32_t mBlocks = CeilDiv(tailM_, cube_.baseM);
        int32_t nBlocks = CeilDiv(tailN_, cube_.baseN);
        int32_t biasBlock = -1;
        for (int32_t round = 0; mm.template Iterate<true>(); ++round) {
            int32_t mb = cube_.iterateOrder == 0 ? round % mBlocks : round / nBlocks;
            int32_t nb = cube_.iterateOrder == 0 ? round / mBlocks : round % nBlocks;
            int32_t curM = Min(cube_.baseM, tailM_ - mb * cube_.baseM);
            int32_t curN = Min(cube_.baseN, tailN_ - nb * cube_.baseN);
            if (nb != biasBlock) {
                LoadBias(nb, curN);
                biasBlock = nb;
            }
            LocalTensor<float> cLocal = cQueue_.AllocTensor<float>();
            mm.template GetTensorC<true>(cLocal, false, true);  // the block as [baseM, baseN]
            cQueue_.EnQue(cLocal);
            Epilogue(mb, nb, curM, curN);
        }
        mm.End();
    }

    MatmulT mm;

private:
    // The float bias of N block nb in biasBuf (only curN values are read).
    __aicore__ inline void LoadBias(int32_t nb, int32_t curN)
    {
        PipeBarrier<PIPE_ALL>();  // the previous block's Add has finished with biasBuf
        LocalTensor<float> biasF = biasBuf_.Get<float>();
        if constexpr (IsSameType<T, half>::value) {
            LocalTensor<T> biasH = biasCastBuf_.Get<T>();
            CopyBias(biasH, nb, curN);
            Cast(biasF, biasH, RoundMode::CAST_NONE, curN);
            PipeBarrier<PIPE_V>();
        } else {
            CopyBias(biasF, nb, curN);
        }
    }

    __aicore__ inline void CopyBias(const LocalTensor<T>& dst, int32_t nb, int32_t curN)
    {
        if (curN * sizeof(T) % 32 == 0) {
            DataCopy(dst, biasGm_[nb * cube_.baseN], curN);
        } else {
            DataCopyExtParams copyParams{1, static_cast<uint32_t>(curN * sizeof(T)), 0, 0, 0};
            DataCopyPadExtParams<T> padParams{false, 0, 0, 0};
            DataCopyPad(dst, biasGm_[nb * cube_.baseN], copyParams, padParams);
        }
        event_t eventMte2ToV = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::MTE2_V));
        SetFlag<HardEvent::MTE2_V>(eventMte2ToV);
        WaitFlag<HardEvent::MTE2_V>(eventMte2ToV);
    }

    // bias + GELU on the C block, epiRows rows at a time, each chunk copied out to GM.
    __aicore__ inline void Epilogue(int32_t mb, int32_t nb, int32_t curM, int32_t curN)
    {
        LocalTensor<float> cLocal = cQueue_.DeQue<float>();
        LocalTensor<float> biasF = biasBuf_.Get<float>();
        for (int32_t row0 = 0; row0 < curM; row0 += epiRows_) {
            int32_t rows = Min(epiRows_, curM - row0);
            LocalTensor<float> chunk = cLocal[row0 * cube_.baseN];
            for (int32_t r = 0; r < rows; ++r) {
                Add(chunk[r * cube_.baseN], chunk[r * cube_.baseN], biasF, curN);
            }
            LocalTensor<T> outLocal = outQueue_.AllocTensor<T>();
            if constexpr (IsSameType<T, half>::value) {
                Gelu(chunk, chunk, rows * cube_.baseN);
                Cast(outLocal, chunk, RoundMode::CAST_NONE, rows * cube_.baseN);
            } else {
                Gelu(outLocal, chunk, rows * cube_.baseN);
            }
            outQueue_.EnQue(outLocal);
            CopyOut(mb * cube_.baseM + row0, nb * cube_.baseN, rows, curN);
        }
        cQueue_.FreeTensor(cLocal);
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

    TQue<TPosition::VECIN, 1> cQueue_;
    TQue<TPosition::VECOUT, 2> outQueue_;
    TBuf<TPosition::VECCALC> biasBuf_;
    TBuf<TPosition::VECCALC> biasCastBuf_;
    GlobalTensor<T> xGm_;
    GlobalTensor<T> wGm_;
    GlobalTensor<T> biasGm_;
    GlobalTensor<T> outGm_;
    TCubeTiling cube_;
    int32_t epiRows_ = 1;
    int32_t tailM_ = 0;
    int32_t tailN_ = 0;
};

extern "C" __global__ __aicore__ void linear_add_gelu(GM_ADDR x, GM_ADDR w, GM_ADDR bias, GM_ADDR out,
                                                      GM_ADDR workspace, LinearAddGeluTiling tiling)
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
    KernelLinearAddGelu<DTYPE_X> op;
    op.Init(x, w, bias, out, tiling, &pipe);
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), op.mm, &tiling.cube);
    op.Process();
}
