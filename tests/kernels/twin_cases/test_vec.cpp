// Vector ops against scalar references: float, half (rounded per op), int32 wraparound, casts.
#include <vector>

#include "check.h"

using namespace AscendC;

constexpr int N = 200;

struct Ub {
    TPipe pipe;
    TBuf<TPosition::VECCALC> bufs[4];
    Ub() { for (auto& b : bufs) pipe.InitBuffer(b, N * 4); }
    template <typename T>
    LocalTensor<T> Get(int i) { return bufs[i].Get<T>(N); }
};

static float Val(int i) { return (i - N / 2) * 0.37f + 0.01f * (i % 7); }

static void FloatOps()
{
    FreshCore();
    Ub ub;
    auto a = ub.Get<float>(0), b = ub.Get<float>(1), d = ub.Get<float>(2);
    for (int i = 0; i < N; ++i) { a.SetValue(i, Val(i)); b.SetValue(i, 1.5f + 0.25f * (i % 5)); }
    Add(d, a, b, N);
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == a.GetValue(i) + b.GetValue(i), "Add %d", i);
    Div(d, a, b, N);
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == a.GetValue(i) / b.GetValue(i), "Div %d", i);
    for (int i = 0; i < N; ++i) d.SetValue(i, 0.5f - Val(i));
    FusedMulAdd(d, a, b, N);  // d = a * d + b, one rounding
    for (int i = 0; i < N; ++i) {
        CHECK(d.GetValue(i) == std::fma(a.GetValue(i), 0.5f - Val(i), b.GetValue(i)), "FusedMulAdd %d", i);
    }
    Muls(d, a, 3.0f, N);
    Relu(d, d, N);  // in place
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == std::max(a.GetValue(i) * 3.0f, 0.0f), "Muls+Relu %d", i);
    LeakyRelu(d, a, 0.1f, N);
    for (int i = 0; i < N; ++i) {
        float x = a.GetValue(i);
        CHECK(d.GetValue(i) == (x >= 0 ? x : x * 0.1f), "LeakyRelu %d", i);
    }
    Exp(d, a, N);
    for (int i = 0; i < N; ++i) CHECK(Close(d.GetValue(i), std::exp(double(a.GetValue(i))), 4e-7, 0), "Exp %d", i);
    {
        // The edges: NaN stays NaN, results stay finite normal floats up to the clamp (88.72).
        const float edge[] = {std::nanf(""), 88.5f, 88.72f, 1000.0f, -1000.0f};
        for (int i = 0; i < 5; ++i) b.SetValue(i, edge[i]);
        Exp(d, b, 5);
        CHECK(std::isnan(d.GetValue(0)), "Exp(NaN) %g", d.GetValue(0));
        CHECK(Close(d.GetValue(1), std::exp(88.5), 4e-7, 0), "Exp(88.5) %g", d.GetValue(1));
        CHECK(Close(d.GetValue(2), std::exp(double(88.72f)), 4e-7, 0), "Exp(88.72) %g", d.GetValue(2));
        CHECK(std::isfinite(d.GetValue(3)) && std::isnormal(d.GetValue(4)), "Exp clamps %g %g", d.GetValue(3),
              d.GetValue(4));
        for (int i = 0; i < N; ++i) b.SetValue(i, 1.5f + 0.25f * (i % 5));
    }
    Gelu(d, a, N);
    for (int i = 0; i < N; ++i) {
        // Against the function in double. Deep in the negative tail GELU is about x e^z, so the
        // rounding of z in float (2^-24 |z|) alone moves the result by that much relatively.
        double x = a.GetValue(i), z = 1.5957691216057308 * (x + 0.044715 * x * x * x);
        double want = x / (1.0 + std::exp(-z));
        CHECK(Close(d.GetValue(i), want, 1e-6 + std::fabs(z) * 0x1p-24, 1e-30), "Gelu %d: %g vs %g", i,
              d.GetValue(i), want);
    }
    SwiGLU(d, a, b, 1.0f, N);
    for (int i = 0; i < N; ++i) {
        double g = b.GetValue(i), want = a.GetValue(i) * g / (1 + std::exp(-g));
        CHECK(Close(d.GetValue(i), want, 1e-6, 1e-30), "SwiGLU %d", i);
    }
    // Its destination may overlap neither source (the device's passes overwrite src1 first).
    EXPECT_ERROR(SwiGLU(b, a, b, 1.0f, N), "SwiGLU: the destination overlaps a source");
    EXPECT_ERROR(SwiGLU(a, a, b, 1.0f, N), "SwiGLU: the destination overlaps a source");
    Mins(d, a, 1.0f, N);
    Maxs(d, d, 0.0f, N);
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == std::min(std::max(a.GetValue(i), 0.0f), 1.0f), "clamp %d", i);
    ReduceSum(d, b, ub.Get<float>(3), N);
    double sum = 0;
    for (int i = 0; i < N; ++i) sum += b.GetValue(i);
    CHECK(Close(d.GetValue(0), sum, 1e-6, 0), "ReduceSum %g vs %g", d.GetValue(0), sum);
    {
        // The documented order, bit for bit (N is not a multiple of the 64 lanes).
        float lanes[64] = {};
        for (int i = 0; i < N; ++i) lanes[i % 64] += a.GetValue(i);
        for (int w = 32; w > 0; w /= 2) {
            for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
        }
        ReduceSum(d, a, ub.Get<float>(3), N);
        CHECK(d.GetValue(0) == lanes[0], "ReduceSum order %g vs %g", d.GetValue(0), lanes[0]);
    }
    ReduceMax(d, a, ub.Get<float>(3), N, true);
    uint32_t idx;
    std::memcpy(&idx, d.TwData() + 1, 4);
    CHECK(d.GetValue(0) == a.GetValue(N - 1) && idx == N - 1, "ReduceMax %g at %u", d.GetValue(0), idx);
    EXPECT_ERROR(Add(d, a, b, N + 1), "201 elements exceed the LocalTensor size 200");
    Pass("float_ops");
}

static void HalfOpsRoundPerOp()
{
    FreshCore();
    Ub ub;
    auto a = ub.Get<half>(0), b = ub.Get<half>(1), d = ub.Get<half>(2);
    for (int i = 0; i < N; ++i) { a.SetValue(i, half(Val(i))); b.SetValue(i, half(0.3f + 0.013f * i)); }
    Mul(d, a, b, N);
    for (int i = 0; i < N; ++i) {
        half want = half(float(a.GetValue(i)) * float(b.GetValue(i)));
        CHECK(d.GetValue(i) == want, "Mul %d", i);
    }
    Adds(d, a, half(0.1f), N);
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == half(float(a.GetValue(i)) + float(half(0.1f))), "Adds %d", i);
    Sqrt(d, b, N);
    for (int i = 0; i < N; ++i) CHECK(d.GetValue(i) == half(std::sqrt(float(b.GetValue(i)))), "Sqrt %d", i);
    Pass("half_ops_round_per_op");
}

static void IntegerWraparound()
{
    FreshCore();
    Ub ub;
    auto a = ub.Get<int32_t>(0), b = ub.Get<int32_t>(1), d = ub.Get<int32_t>(2);
    auto u = ub.Get<uint32_t>(3);
    CreateVecIndex(a, INT32_MAX - 5, N);
    CHECK(a.GetValue(6) == INT32_MIN, "CreateVecIndex wraps: %d", a.GetValue(6));
    Duplicate(b, 7, N);
    Add(d, a, b, N);
    CHECK(d.GetValue(0) == INT32_MIN + 1, "Add wraps: %d", d.GetValue(0));
    Muls(d, a, 3, N);
    CHECK(d.GetValue(0) == int32_t(uint32_t(INT32_MAX - 5) * 3u), "Muls wraps");
    ShiftRight(d, b, 1, N);
    CHECK(d.GetValue(0) == 3, "ShiftRight");
    Duplicate(d, -8, N);
    ShiftRight(d, d, 1, N);
    CHECK(d.GetValue(0) == -4, "arithmetic ShiftRight on int32: %d", d.GetValue(0));
    // No arithmetic instruction takes uint32: its bits go through an int32 view, whose sums and
    // products have the same low 32 bits.
    auto ui = u.ReinterpretCast<int32_t>();
    Duplicate(u, 0xFFFFFFF0u, N);
    Adds(ui, ui, 0x20, N);
    CHECK(u.GetValue(0) == 0x10u, "uint32 bits: Adds wraps");
    Muls(ui, ui, int32_t(0x85EBCA6Bu), N);
    CHECK(u.GetValue(0) == uint32_t(0x10u * 0x85EBCA6Bu), "uint32 bits: Muls wraps");
    Duplicate(u, 0x80000000u, N);
    ShiftRight(u, u, 13u, N);
    CHECK(u.GetValue(0) == 0x80000000u >> 13, "logical ShiftRight on uint32");
    ShiftLeft(u, u, 13u, N);
    CHECK(u.GetValue(0) == 0x80000000u, "ShiftLeft");
    Max(d, a, b, N);
    CHECK(d.GetValue(6) == 7 && d.GetValue(0) == INT32_MAX - 5, "signed Max");
    // Bitwise ops on 16-bit lanes, e.g. over a reinterpreted 32-bit tensor or bit mask.
    auto x16 = a.ReinterpretCast<uint16_t>(), y16 = b.ReinterpretCast<uint16_t>(), z16 = d.ReinterpretCast<uint16_t>();
    for (int i = 0; i < N; ++i) { x16.SetValue(i, uint16_t(0xF0F0u + i)); y16.SetValue(i, uint16_t(0x3C3Cu ^ i)); }
    And(z16, x16, y16, N);
    for (int i = 0; i < N; ++i) CHECK(z16.GetValue(i) == uint16_t((0xF0F0u + i) & (0x3C3Cu ^ i)), "And %d", i);
    Or(z16, x16, y16, N);
    for (int i = 0; i < N; ++i) CHECK(z16.GetValue(i) == uint16_t((0xF0F0u + i) | (0x3C3Cu ^ i)), "Or %d", i);
    Pass("integer_wraparound");
}

static void CastModes()
{
    FreshCore();
    Ub ub;
    auto f = ub.Get<float>(0), g = ub.Get<float>(1);
    auto h = ub.Get<half>(2);
    auto i32 = ub.Get<int32_t>(3);
    const float in[6] = {1.0f + 1.0f / 4096, -1.0f - 1.0f / 4096, 2.5f, -2.5f, 1.0f + 1.0f / 2048, 65519.0f};
    for (int i = 0; i < 6; ++i) f.SetValue(i, in[i]);
    Cast(h, f, RoundMode::CAST_NONE, 6);
    CHECK(h.GetValue(0) == half(1.0f) && h.GetValue(4) == half(1.0f), "RINT ties to even");
    Cast(h, f, RoundMode::CAST_FLOOR, 6);
    CHECK(h.GetValue(0) == half(1.0f) && h.GetValue(1) == half(-1.0f - 2.0f / 2048 / 2 * 2), "FLOOR");
    Cast(h, f, RoundMode::CAST_CEIL, 6);
    CHECK(float(h.GetValue(0)) == 1.0f + 1.0f / 1024 && h.GetValue(1) == half(-1.0f), "CEIL");
    Cast(h, f, RoundMode::CAST_ROUND, 6);
    CHECK(h.GetValue(0) == half(1.0f) && float(h.GetValue(4)) == 1.0f + 1.0f / 1024, "ROUND ties away");
    Cast(h, f, RoundMode::CAST_TRUNC, 6);
    CHECK(h.GetValue(0) == half(1.0f) && h.GetValue(1) == half(-1.0f), "TRUNC");
    Cast(h, f, RoundMode::CAST_ODD, 6);
    CHECK(float(h.GetValue(0)) == 1.0f + 1.0f / 1024, "ODD");
    Cast(i32, f, RoundMode::CAST_RINT, 6);
    CHECK(i32.GetValue(2) == 2 && i32.GetValue(3) == -2, "RINT to int");
    Cast(i32, f, RoundMode::CAST_ROUND, 6);
    CHECK(i32.GetValue(2) == 3 && i32.GetValue(3) == -3, "ROUND to int");
    Cast(i32, f, RoundMode::CAST_FLOOR, 6);
    CHECK(i32.GetValue(3) == -3, "FLOOR to int");
    i32.SetValue(0, (1 << 24) + 1);
    Cast(g, i32, RoundMode::CAST_NONE, 1);
    CHECK(g.GetValue(0) == float(1 << 24), "int32 -> float RINT");
    Cast(g, i32, RoundMode::CAST_CEIL, 1);
    CHECK(g.GetValue(0) == float((1 << 24) + 2), "int32 -> float CEIL");
    Cast(g, h, RoundMode::CAST_NONE, 6);
    CHECK(g.GetValue(5) == 65504.0f, "half -> float");
    Pass("cast_modes");
}

// Gather: byte offsets from the source start (plus srcBaseAddr), repeated and reversed reads,
// half and float; misaligned or out-of-range offsets are errors.
static void GatherByByteOffsets()
{
    FreshCore();
    Ub ub;
    auto src = ub.Get<float>(0), dst = ub.Get<float>(1);
    auto off = ub.Get<uint32_t>(2);
    for (int i = 0; i < N; ++i) src.SetValue(i, Val(i));
    for (int i = 0; i < N; ++i) off.SetValue(i, uint32_t((N - 1 - i) / 2 * 4));
    Gather(dst, src, off, 0u, N);
    for (int i = 0; i < N; ++i) CHECK(dst.GetValue(i) == src.GetValue((N - 1 - i) / 2), "Gather float %d", i);
    Gather(dst, src, off, 8u, 3);
    CHECK(dst.GetValue(0) == src.GetValue((N - 1) / 2 + 2), "Gather srcBaseAddr");
    auto hsrc = ub.Get<half>(3), hdst = dst.ReinterpretCast<half>();
    for (int i = 0; i < N; ++i) hsrc.SetValue(i, half(Val(i)));
    for (int i = 0; i < N; ++i) off.SetValue(i, uint32_t((i * 7) % N * 2));
    Gather(hdst, hsrc, off, 0u, N);
    for (int i = 0; i < N; ++i) CHECK(hdst.GetValue(i) == hsrc.GetValue((i * 7) % N), "Gather half %d", i);
    // Runs of consecutive offsets (the copy path) broken mid-chunk, then a lone element.
    auto runFrom = [](int i) { return i < 40 ? i + 3 : (i == 77 ? 0 : i - 3); };
    for (int i = 0; i < N; ++i) off.SetValue(i, uint32_t(runFrom(i) * 4));
    Gather(dst, src, off, 0u, N);
    for (int i = 0; i < N; ++i) CHECK(dst.GetValue(i) == src.GetValue(runFrom(i)), "Gather run float %d", i);
    for (int i = 0; i < N; ++i) off.SetValue(i, uint32_t(runFrom(i) * 2));
    Gather(hdst, hsrc, off, 0u, N - 5);
    for (int i = 0; i < N - 5; ++i) CHECK(hdst.GetValue(i) == hsrc.GetValue(runFrom(i)), "Gather run half %d", i);
    off.SetValue(0, 2);
    EXPECT_ERROR(Gather(dst, src, off, 0u, 1), "not 4 B aligned");
    off.SetValue(0, N * 4);
    EXPECT_ERROR(Gather(dst, src, off, 0u, 1), "outside the 800 B source");
    Pass("gather_by_byte_offsets");
}

// Masks are little-endian bit strings; the count form of Compare takes whole 256 B repeats.
static void CompareAndSelect()
{
    FreshCore();
    Ub ub;
    constexpr int M = 192;  // three 64-float repeats
    auto a = ub.Get<float>(0), b = ub.Get<float>(1), d = ub.Get<float>(2);
    auto mask = ub.Get<uint8_t>(3);
    for (int i = 0; i < M; ++i) { a.SetValue(i, Val(i)); b.SetValue(i, Val((i * 37) % M)); }
    b.SetValue(5, a.GetValue(5));  // one tie
    const CMPMODE modes[] = {CMPMODE::LT, CMPMODE::GT, CMPMODE::EQ, CMPMODE::LE, CMPMODE::GE, CMPMODE::NE};
    for (CMPMODE mode : modes) {
        auto want = [mode](float x, float y) {
            switch (mode) {
                case CMPMODE::LT: return x < y;
                case CMPMODE::GT: return x > y;
                case CMPMODE::EQ: return x == y;
                case CMPMODE::LE: return x <= y;
                case CMPMODE::GE: return x >= y;
                default: return x != y;
            }
        };
        Compare(mask, a, b, mode, M);
        for (int i = 0; i < M; ++i) {
            bool bit = (mask.GetValue(i / 8) >> (i % 8)) & 1;
            CHECK(bit == want(a.GetValue(i), b.GetValue(i)), "Compare mode %d element %d", int(mode), i);
        }
        CompareScalar(mask, a, 1.25f, mode, M);
        for (int i = 0; i < M; ++i) {
            bool bit = (mask.GetValue(i / 8) >> (i % 8)) & 1;
            CHECK(bit == want(a.GetValue(i), 1.25f), "CompareScalar mode %d element %d", int(mode), i);
        }
    }
    // Bit 0 of byte 0 is element 0: only elements 0 and 9 pass.
    for (int i = 0; i < 64; ++i) b.SetValue(i, i == 0 || i == 9 ? 1.0f : -1.0f);
    CompareScalar(mask, b, 0.0f, CMPMODE::GT, 64);
    CHECK(mask.GetValue(0) == 0x01 && mask.GetValue(1) == 0x02, "bit order %x %x", mask.GetValue(0),
          mask.GetValue(1));

    CompareScalar(mask, a, 0.0f, CMPMODE::GT, M);
    Select(d, mask, a, -7.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, M - 3);  // any count the mask covers
    for (int i = 0; i < M - 3; ++i) {
        float want = a.GetValue(i) > 0.0f ? a.GetValue(i) : -7.0f;
        CHECK(d.GetValue(i) == want, "Select scalar %d", i);
    }
    Select(d, mask, a, b, SELMODE::VSEL_TENSOR_TENSOR_MODE, M);
    for (int i = 0; i < M; ++i) {
        float want = a.GetValue(i) > 0.0f ? a.GetValue(i) : b.GetValue(i);
        CHECK(d.GetValue(i) == want, "Select tensor %d", i);
    }
    auto h = ub.Get<half>(2);
    for (int i = 0; i < 128; ++i) h.SetValue(i, half(Val(i)));
    CompareScalar(mask, h, half(0.0f), CMPMODE::LE, 128);
    for (int i = 0; i < 128; ++i) {
        bool bit = (mask.GetValue(i / 8) >> (i % 8)) & 1;
        CHECK(bit == (float(h.GetValue(i)) <= 0.0f), "CompareScalar half %d", i);
    }

    EXPECT_ERROR(CompareScalar(mask, a, 0.0f, CMPMODE::GT, 48), "not a whole number of 256 B repeats");
    EXPECT_ERROR(CompareScalar(mask, h, half(0.0f), CMPMODE::GT, 64), "multiple of 128 elements");
    auto ints = ub.Get<int32_t>(1);
    EXPECT_ERROR(CompareScalar(mask, ints, 3, CMPMODE::LT, 64), "EQ only");
    EXPECT_ERROR(Compare(mask, ints, ints, CMPMODE::GT, 64), "EQ only");
    for (int i = 0; i < 64; ++i) ints.SetValue(i, i % 3 == 0 ? 7 : -i);
    auto sevens = ub.Get<int32_t>(2);
    for (int i = 0; i < 64; ++i) sevens.SetValue(i, 7);
    Compare(mask, ints, sevens, CMPMODE::EQ, 64);
    for (int i = 0; i < 64; ++i) {
        bool bit = (mask.GetValue(i / 8) >> (i % 8)) & 1;
        CHECK(bit == (i % 3 == 0), "Compare int32 EQ %d", i);
    }
    EXPECT_ERROR(Select(d, mask, a, b, SELMODE::VSEL_CMPMASK_SPR, M), "VSEL_TENSOR_TENSOR_MODE only");
    Pass("compare_and_select");
}

int main()
{
    FloatOps();
    HalfOpsRoundPerOp();
    IntegerWraparound();
    CastModes();
    GatherByByteOffsets();
    CompareAndSelect();
    return 0;
}
