// Matmul high-level API vs a naive triple loop: odd shapes, tilings, tails, bias, errors.
// `test_matmul bench` times one 512x512x512 fp32 block instead.
#include <chrono>
#include <random>
#include <vector>

#include "check.h"
#include "lib/matmul_intf.h"

using namespace AscendC;

struct Shape { int M, N, K, singleM, singleN; };
struct Split { int baseM, baseN, baseK, stepM, stepN, stepKa, stepKb, depthA1, depthB1, order; };

static TCubeTiling MakeTiling(const Shape& s, const Split& p, int isBias = 0)
{
    TCubeTiling t{};
    t.M = s.M; t.N = s.N; t.Ka = s.K; t.Kb = s.K;
    t.singleCoreM = s.singleM; t.singleCoreN = s.singleN; t.singleCoreK = s.K;
    t.usedCoreNum = ((s.M + s.singleM - 1) / s.singleM) * ((s.N + s.singleN - 1) / s.singleN);
    t.baseM = p.baseM; t.baseN = p.baseN; t.baseK = p.baseK;
    t.stepM = p.stepM; t.stepN = p.stepN; t.stepKa = p.stepKa; t.stepKb = p.stepKb;
    t.depthA1 = p.depthA1; t.depthB1 = p.depthB1; t.iterateOrder = p.order; t.isBias = isBias;
    t.dbL0A = 2; t.dbL0B = 2; t.dbL0C = 1;
    return t;
}

// Every core's part of C = A*B (+bias), through IterateAll to GM or Iterate/GetTensorC to UB.
template <typename T, typename CT>
static std::vector<CT> RunAllCores(const TCubeTiling& t, std::vector<T>& a, std::vector<T>& b, std::vector<float>& bias,
                                   bool viaUb)
{
    std::vector<CT> c(size_t(t.M) * t.N, CT(-7));
    int mCores = (t.M + t.singleCoreM - 1) / t.singleCoreM;
    for (int blk = 0; blk < t.usedCoreNum; ++blk) {
        twin::BeginBlock(blk, t.usedCoreNum, twin::kDefaultLimits);
        int mIdx = blk % mCores, nIdx = blk / mCores;
        int tailM = std::min(t.singleCoreM, t.M - mIdx * t.singleCoreM);
        int tailN = std::min(t.singleCoreN, t.N - nIdx * t.singleCoreN);
        GlobalTensor<T> aG, bG;
        GlobalTensor<CT> cG;
        GlobalTensor<float> biasG;
        aG.SetGlobalBuffer(a.data() + size_t(mIdx) * t.singleCoreM * t.Ka);
        bG.SetGlobalBuffer(b.data() + nIdx * t.singleCoreN);
        cG.SetGlobalBuffer(c.data() + size_t(mIdx) * t.singleCoreM * t.N + nIdx * t.singleCoreN);
        biasG.SetGlobalBuffer(bias.data() + nIdx * t.singleCoreN);
        TPipe pipe;
        Matmul<MatmulType<TPosition::GM, CubeFormat::ND, T>, MatmulType<TPosition::GM, CubeFormat::ND, T>,
               MatmulType<TPosition::VECIN, CubeFormat::ND, CT>, MatmulType<TPosition::GM, CubeFormat::ND, float>>
            mm;
        REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &t);
        mm.SetTensorA(aG);
        mm.SetTensorB(bG);
        if (t.isBias) mm.SetBias(biasG);
        mm.SetTail(tailM, tailN);
        if (!viaUb) {
            mm.IterateAll(cG);
        } else {
            TQue<TPosition::VECIN, 1> q;
            pipe.InitBuffer(q, 1, t.baseM * t.baseN * sizeof(CT));
            int mBlocks = (tailM + t.baseM - 1) / t.baseM, nBlocks = (tailN + t.baseN - 1) / t.baseN;
            for (int round = 0; mm.template Iterate<true>(); ++round) {
                int mb = t.iterateOrder == 0 ? round % mBlocks : round / nBlocks;
                int nb = t.iterateOrder == 0 ? round / mBlocks : round % nBlocks;
                LocalTensor<CT> ub = q.AllocTensor<CT>();
                mm.template GetTensorC<true>(ub, 0, true);
                for (int r = 0; r < std::min(t.baseM, tailM - mb * t.baseM); ++r) {
                    for (int j = 0; j < std::min(t.baseN, tailN - nb * t.baseN); ++j) {
                        cG.SetValue(size_t(mb * t.baseM + r) * t.N + nb * t.baseN + j, ub.GetValue(r * t.baseN + j));
                    }
                }
                q.FreeTensor(ub);
            }
        }
        mm.End();
    }
    return c;
}

template <typename T, typename CT>
static void Case(const char* name, const Shape& s, const Split& p, bool bias, bool viaUb)
{
    TCubeTiling t = MakeTiling(s, p, bias ? 1 : 0);
    std::mt19937 rng(s.M * 131 + s.N * 7 + s.K);
    std::uniform_int_distribution<int> d(-4, 4);
    std::vector<T> a(size_t(s.M) * s.K), b(size_t(s.K) * s.N);
    std::vector<float> bv(s.N);
    for (auto& v : a) v = T(d(rng) * 0.5f);  // exact in half; float sums stay exact
    for (auto& v : b) v = T(d(rng) * 0.25f);
    for (auto& v : bv) v = float(d(rng));
    std::vector<CT> c = RunAllCores<T, CT>(t, a, b, bv, viaUb);
    for (int i = 0; i < s.M; ++i) {
        for (int j = 0; j < s.N; ++j) {
            float want = bias ? bv[j] : 0.0f;
            for (int k = 0; k < s.K; ++k) want += float(a[size_t(i) * s.K + k]) * float(b[size_t(k) * s.N + j]);
            CHECK(c[size_t(i) * s.N + j] == CT(want), "%s: C[%d][%d] = %g, want %g", name, i, j,
                  double(c[size_t(i) * s.N + j]), double(want));
        }
    }
    Pass(name);
}

static void Errors()
{
    Shape s{64, 64, 64, 64, 64};
    using MM = Matmul<MatmulType<TPosition::GM, CubeFormat::ND, float>, MatmulType<TPosition::GM, CubeFormat::ND, float>,
                      MatmulType<TPosition::VECIN, CubeFormat::ND, float>>;
    using MMH = Matmul<MatmulType<TPosition::GM, CubeFormat::ND, half>, MatmulType<TPosition::GM, CubeFormat::ND, half>,
                       MatmulType<TPosition::VECIN, CubeFormat::ND, float>>;
    FreshCore();
    TCubeTiling t = MakeTiling(s, {128, 16, 128, 1, 1, 1, 1, 1, 1, 0});
    MM mm1;
    EXPECT_ERROR(mm1.Init(&t), "Matmul::Init: L0A overflow: requested 131072 B at offset 0, exceeds the limit 65536 B");
    FreshCore();
    t = MakeTiling(s, {128, 256, 16, 1, 1, 1, 1, 1, 1, 0});
    t.dbL0C = 2;
    MM mm2;
    EXPECT_ERROR(mm2.Init(&t), "L0C overflow: requested 262144 B");
    FreshCore();
    t = MakeTiling(s, {64, 64, 64, 4, 1, 8, 1, 32, 1, 0});
    MM mm3;
    EXPECT_ERROR(mm3.Init(&t), "L1 overflow: requested 16384 B at offset 524288, exceeds the limit 524288 B");
    t = MakeTiling(s, {24, 16, 16, 1, 1, 1, 1, 1, 1, 0});
    MM mm4;
    EXPECT_ERROR(mm4.Init(&t), "baseM 24 is not a positive multiple of 16");
    t = MakeTiling(s, {16, 16, 16, 2, 1, 1, 1, 3, 1, 0});
    MM mm5;
    EXPECT_ERROR(mm5.Init(&t), "depthA1 3 is not a positive multiple of stepM*stepKa = 2");
    t = MakeTiling(s, {16, 16, 8, 1, 1, 1, 1, 1, 1, 0});
    MMH mm6;
    EXPECT_ERROR(mm6.Init(&t), "baseK 8 is not a positive multiple of 16");
    FreshCore();
    MM mm7;
    t = MakeTiling(s, {16, 16, 16, 1, 1, 1, 1, 1, 1, 0});
    mm7.Init(&t);
    EXPECT_ERROR(mm7.Iterate(), "call SetTensorA and SetTensorB first");
    // A block to UB comes as [baseM, baseN] with the sequential write; the other mode, the block at
    // its place in the single-core result, is not modelled (and a baseM x baseN buffer cannot hold it).
    FreshCore();
    std::vector<float> ones(size_t(64) * 64, 1.0f);
    GlobalTensor<float> aG, bG;
    aG.SetGlobalBuffer(ones.data());
    bG.SetGlobalBuffer(ones.data());
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 16 * 16 * sizeof(float));
    MM mm8;
    REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm8, &t);
    mm8.SetTensorA(aG);
    mm8.SetTensorB(bG);
    CHECK(mm8.Iterate(), "a first block");
    LocalTensor<float> ub = q.AllocTensor<float>();
    EXPECT_ERROR(mm8.GetTensorC(ub), "without enSequentialWrite");
    mm8.GetTensorC(ub, 0, true);
    CHECK(ub.GetValue(0) == 64.0f, "the block's first element: %g", ub.GetValue(0));
    q.FreeTensor(ub);
    Pass("matmul_errors");
}

static void Bench()
{
    const int n = 512;
    for (Split p : {Split{128, 128, 64, 4, 1, 2, 2, 8, 4, 0}, Split{128, 256, 32, 4, 1, 2, 2, 8, 4, 0}}) {
        TCubeTiling t = MakeTiling({n, n, n, n, n}, p);
        std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), bias(n), c(size_t(n) * n);
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
            FreshCore();
            GlobalTensor<float> aG, bG, cG;
            aG.SetGlobalBuffer(a.data());
            bG.SetGlobalBuffer(b.data());
            cG.SetGlobalBuffer(c.data());
            auto t0 = std::chrono::steady_clock::now();
            Matmul<MatmulType<TPosition::GM, CubeFormat::ND, float>, MatmulType<TPosition::GM, CubeFormat::ND, float>,
                   MatmulType<TPosition::GM, CubeFormat::ND, float>>
                mm;
            mm.Init(&t);
            mm.SetTensorA(aG);
            mm.SetTensorB(bG);
            mm.IterateAll(cG);
            mm.End();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        CHECK(c[12345] == 0.5f * 0.25f * n, "bench result");
        std::printf("BENCH fp32 512x512x512 base %dx%dx%d: %.3f ms, %.1f GFLOP/s\n", p.baseM, p.baseN, p.baseK,
                    best * 1e3, 2.0 * n * n * n / best * 1e-9);
    }
}

int main(int argc, char** argv)
{
    if (argc > 1 && std::string(argv[1]) == "bench") {
        Bench();
        return 0;
    }
    const Split tiny{16, 16, 8, 1, 1, 1, 1, 1, 1, 0};
    Case<float, float>("matmul_f32_1x17x3", {1, 17, 3, 1, 17}, tiny, false, false);
    Case<float, float>("matmul_f32_1x17x3_ub", {1, 17, 3, 1, 17}, tiny, false, true);
    const Shape odd{33, 40, 70, 33, 40}, split{33, 40, 70, 16, 32};
    Case<float, float>("matmul_f32_33x40x70_m_first", odd, {16, 16, 16, 2, 1, 2, 3, 8, 3, 0}, false, false);
    Case<float, float>("matmul_f32_33x40x70_n_first_ub", odd, {16, 16, 16, 2, 1, 2, 3, 8, 3, 1}, false, true);
    Case<float, float>("matmul_f32_33x40x70_deep_steps", odd, {32, 32, 24, 1, 2, 3, 1, 6, 4, 1}, false, false);
    Case<float, float>("matmul_f32_33x40x70_tails_bias", split, {16, 16, 8, 1, 2, 1, 2, 2, 8, 0}, true, true);
    // 48 of 64 columns: a 64-wide panel computed for its first 48 columns only.
    Case<float, float>("matmul_f32_33x48x70_part_panel", {33, 48, 70, 33, 48}, {32, 64, 16, 1, 1, 1, 1, 1, 1, 0}, true,
                       false);
    // Last panels 48 wide (100 of 112 columns) and 32 wide with 16 used (136 of 160), and edge
    // blocks of 2 and 4 rows left over by the 6-row micro-kernel.
    Case<float, float>("matmul_f32_33x100x70_panel48", {33, 100, 70, 33, 100}, {32, 112, 16, 1, 1, 1, 1, 1, 1, 0},
                       true, false);
    Case<float, float>("matmul_f32_40x136x70_panel32", {40, 136, 70, 40, 136}, {16, 160, 24, 1, 1, 1, 1, 1, 1, 1},
                       false, true);
    Case<float, half>("matmul_f32_to_f16_tails", split, {16, 32, 32, 1, 1, 2, 2, 4, 2, 1}, false, false);
    Case<half, float>("matmul_f16_1x17x3", {1, 17, 3, 1, 17}, {16, 16, 16, 1, 1, 1, 1, 1, 1, 0}, false, true);
    Case<half, float>("matmul_f16_33x40x70_m_first", odd, {16, 16, 16, 2, 1, 2, 3, 8, 3, 0}, false, false);
    Case<half, float>("matmul_f16_33x40x70_tails_n_first_bias", split, {16, 16, 32, 1, 2, 1, 1, 2, 4, 1}, true, true);
    Case<half, half>("matmul_f16_to_f16_tails", split, {16, 32, 16, 1, 1, 1, 2, 2, 4, 0}, false, false);
    Errors();
    return 0;
}
