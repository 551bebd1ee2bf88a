// Count-form vector instructions on local tensors.
//
// Arithmetic rules: half computes in float and rounds each result to half (as numpy float16 does);
// integer Add/Sub/Mul/Adds/Muls wrap modulo 2^32. Checks run once per call; the loops are plain
// element-wise loops the compiler vectorizes (dst may alias a source exactly).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor.h"

// Loops marked TW_IVDEP that cannot vectorize (libm calls, rounding-mode switches) stay scalar.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace AscendC {

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

}  // namespace AscendC

namespace twin {

constexpr float kExpShifter = 12582912.0f;  // 1.5 * 2^23: x + kExpShifter keeps round(x) in its low bits

// 2^n for t = kExpShifter + n, n in [-126, 127] (so that 2^n is a normal float).
inline float Pow2OfShifted(float t)
{
    int32_t bits;
    std::memcpy(&bits, &t, 4);
    bits = (bits - 0x4B400000 + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return scale;
}

// expf to about 2 ulp (Cephes polynomial); branch-free so that loops calling it vectorize.
// Inputs are clamped to [-87.33654, 88.72283], so results are normal floats: exp(-inf) gives
// 2^-126, exp(+inf) 3.4e38; NaN stays NaN. n = round(x / ln2) comes from the shifter, capped at
// 127 so that 2^n is a normal float.
inline float Exp(float x)
{
    x = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
    float t = x * 1.44269504088896341f + kExpShifter;
    t = t > kExpShifter + 127.0f ? kExpShifter + 127.0f : t;
    const float n = t - kExpShifter;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * Pow2OfShifted(t);
}

template <typename T>
using Wide = std::conditional_t<std::is_integral_v<T>, uint32_t, float>;  // the type ops compute in

template <typename T>
inline Wide<T> Up(T v) { return static_cast<Wide<T>>(v); }

template <typename T, typename F>
inline void Unary(const char* what, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                  int32_t count, F f)
{
    if (count < 0) Fail(what, ": negative count ", count);
    CheckLocal(what, dst, count);
    CheckLocal(what, src, count);
    T* d = dst.TwData();
    const T* s = src.TwData();
    PumpCheap(uint64_t(count) * sizeof(T));
    TW_IVDEP
    for (int32_t i = 0; i < count; ++i) d[i] = static_cast<T>(f(Up(s[i])));
}

template <typename T, typename F>
inline void Binary(const char* what, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src0,
                   const AscendC::LocalTensor<T>& src1, int32_t count, F f)
{
    if (count < 0) Fail(what, ": negative count ", count);
    CheckLocal(what, dst, count);
    CheckLocal(what, src0, count);
    CheckLocal(what, src1, count);
    T* d = dst.TwData();
    const T* a = src0.TwData();
    const T* b = src1.TwData();
    PumpCheap(uint64_t(count) * 2 * sizeof(T));
    TW_IVDEP
    for (int32_t i = 0; i < count; ++i) d[i] = static_cast<T>(f(Up(a[i]), Up(b[i])));
}

template <typename T>
constexpr bool kFloating = std::is_same_v<T, float> || std::is_same_v<T, half>;
template <typename T>
constexpr bool kInteger = std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> ||
                          std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t>;
// The arithmetic instructions (Add, Sub, Mul, Max, Min) take half, float, int16_t and int32_t: no
// unsigned type (a uint32 tensor is reinterpreted as int32, whose low 32 bits are the same).
template <typename T>
constexpr bool kArithmetic = kFloating<T> || std::is_same_v<T, int32_t> || std::is_same_v<T, int16_t>;
// The bitwise instructions take 16-bit integers only (a 32-bit or mask tensor is reinterpreted).
template <typename T>
constexpr bool kBits16 = std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t>;

}  // namespace twin

namespace AscendC {

#define TW_BINARY(NAME, EXPR, ALLOWED)                                                                  \
    template <typename T>                                                                               \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, \
                     const int32_t& count)                                                              \
    {                                                                                                   \
        static_assert(ALLOWED, #NAME ": unsupported data type");                                        \
        twin::Binary(#NAME, dst, src0, src1, count, [](auto a, auto b) { return EXPR; });               \
    }

TW_BINARY(Add, a + b, twin::kArithmetic<T>)
TW_BINARY(Sub, a - b, twin::kArithmetic<T>)
TW_BINARY(Mul, a * b, twin::kArithmetic<T>)
TW_BINARY(Div, a / b, twin::kFloating<T>)
TW_BINARY(Max, static_cast<T>(a) > static_cast<T>(b) ? a : b, twin::kArithmetic<T>)
TW_BINARY(Min, static_cast<T>(a) < static_cast<T>(b) ? a : b, twin::kArithmetic<T>)
TW_BINARY(And, a & b, twin::kBits16<T>)
TW_BINARY(Or, a | b, twin::kBits16<T>)
#undef TW_BINARY

// dst = src0 * dst + src1, rounded once (the vector unit's fused multiply-add).
template <typename T>
inline void FusedMulAdd(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                        const int32_t& count)
{
    static_assert(twin::kFloating<T>, "FusedMulAdd: unsupported data type");
    const char* what = "FusedMulAdd";
    if (count < 0) twin::Fail(what, ": negative count ", count);
    twin::CheckLocal(what, dst, count);
    twin::CheckLocal(what, src0, count);
    twin::CheckLocal(what, src1, count);
    T* d = dst.TwData();
    const T* a = src0.TwData();
    const T* b = src1.TwData();
    twin::PumpCheap(uint64_t(count) * 3 * sizeof(T));
    TW_IVDEP
    for (int32_t i = 0; i < count; ++i) {
        d[i] = static_cast<T>(std::fma(static_cast<float>(a[i]), static_cast<float>(d[i]), static_cast<float>(b[i])));
    }
}

#define TW_SCALAR(NAME, EXPR, ALLOWED)                                                                    \
    template <typename T>                                                                                 \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,          \
                     const int32_t& count)                                                                \
    {                                                                                                     \
        static_assert(ALLOWED, #NAME ": unsupported data type");                                          \
        const twin::Wide<T> s = twin::Up(scalarValue);                                                    \
        twin::Unary(#NAME, dst, src, count, [s](auto a) { return EXPR; });                                \
    }

TW_SCALAR(Adds, a + s, twin::kArithmetic<T>)
TW_SCALAR(Muls, a * s, twin::kArithmetic<T>)
TW_SCALAR(Maxs, static_cast<T>(a) > static_cast<T>(s) ? a : s, twin::kArithmetic<T>)
TW_SCALAR(Mins, static_cast<T>(a) < static_cast<T>(s) ? a : s, twin::kArithmetic<T>)
TW_SCALAR(LeakyRelu, a >= 0.0f ? a : a * s, twin::kFloating<T>)
TW_SCALAR(ShiftLeft, a << (s & 31u), twin::kInteger<T>)
#undef TW_SCALAR

// Arithmetic shift for signed types, logical for unsigned.
template <typename T>
inline void ShiftRight(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,
                       const int32_t& count)
{
    static_assert(twin::kInteger<T>, "ShiftRight: unsupported data type");
    const int s = static_cast<int>(scalarValue) & 31;
    twin::Unary("ShiftRight", dst, src, count, [s](uint32_t a) { return static_cast<T>(a) >> s; });
}

#define TW_UNARY(NAME, EXPR)                                                                          \
    template <typename T>                                                                             \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count)      \
    {                                                                                                 \
        static_assert(twin::kFloating<T>, #NAME ": unsupported data type");                           \
        twin::Unary(#NAME, dst, src, count, [](float a) { return EXPR; });                           \
    }

TW_UNARY(Exp, twin::Exp(a))
TW_UNARY(Ln, std::log(a))
TW_UNARY(Abs, std::fabs(a))
TW_UNARY(Reciprocal, 1.0f / a)
TW_UNARY(Sqrt, std::sqrt(a))
TW_UNARY(Rsqrt, 1.0f / std::sqrt(a))
TW_UNARY(Relu, a > 0.0f ? a : 0.0f)
#undef TW_UNARY

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count)
{
    if (count < 0) twin::Fail("Duplicate: negative count ", count);
    twin::CheckLocal("Duplicate", dst, count);
    T* d = dst.TwData();
    const T v = scalarValue;
    for (int32_t i = 0; i < count; ++i) d[i] = v;
}

template <typename T>
inline void CreateVecIndex(const LocalTensor<T>& dst, const T& firstValue, uint32_t count)
{
    static_assert(std::is_same_v<T, int32_t> || std::is_same_v<T, float> || std::is_same_v<T, half>,
                  "CreateVecIndex: unsupported data type");
    twin::CheckLocal("CreateVecIndex", dst, count);
    T* d = dst.TwData();
    if constexpr (std::is_integral_v<T>) {
        const uint32_t first = static_cast<uint32_t>(firstValue);
        for (uint32_t i = 0; i < count; ++i) d[i] = static_cast<T>(first + i);
    } else {
        const float first = static_cast<float>(firstValue);
        for (uint32_t i = 0; i < count; ++i) d[i] = static_cast<T>(first + static_cast<float>(i));
    }
}

// dst[i] = the element of src at byte offset srcBaseAddr + srcOffset[i] (offsets in bytes from the
// start of src, each a multiple of sizeof(T)); the building block of im2col-style rearrangements.
template <typename T>
inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                   const uint32_t srcBaseAddr, const uint32_t count)
{
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Gather: unsupported data type");
    twin::CheckLocal("Gather", dst, count);
    twin::CheckLocal("Gather", srcOffset, count);
    twin::CheckLocal("Gather", src, 0);
    const uint64_t srcBytes = uint64_t(src.GetSize()) * sizeof(T);
    const uint32_t* offsets = srcOffset.TwData();
    T* d = dst.TwData();
    const uint8_t* base = reinterpret_cast<const uint8_t*>(src.TwData());
    // All offsets are checked before any element moves: one pass for the largest offset and the
    // OR of all (alignment), which vectorizes; only then is the first bad one looked for by name.
    uint32_t largest = 0, bits = srcBaseAddr;
    for (uint32_t i = 0; i < count; ++i) {
        largest = offsets[i] > largest ? offsets[i] : largest;
        bits |= offsets[i];
    }
    if (count > 0 && (bits % sizeof(T) != 0 || uint64_t(srcBaseAddr) + largest + sizeof(T) > srcBytes)) {
        for (uint32_t i = 0; i < count; ++i) {
            const uint64_t at = uint64_t(srcBaseAddr) + offsets[i];
            if (at % sizeof(T) != 0 || at + sizeof(T) > srcBytes) {
                twin::Fail("Gather: element ", i, " reads byte offset ", at, ", outside the ", srcBytes,
                           " B source or not ", sizeof(T), " B aligned");
            }
        }
    }
    // Gathers from UB are in practice runs of consecutive elements (im2col rows, slices), and a
    // CPU's gather instruction fetches one lane at a time (x86's is microcoded): 64 B chunks whose
    // offsets step by sizeof(T) move as one copy, others element by element, where scalar loads
    // beat the vectorized gather.
    const uint8_t* from = base + srcBaseAddr;
    constexpr uint32_t kChunk = 64 / sizeof(T);
    uint32_t i = 0;
    for (; i + kChunk <= count; i += kChunk) {
        const uint32_t first = offsets[i];
        bool run = true;
        for (uint32_t k = 0; k < kChunk; ++k) run &= offsets[i + k] == first + k * uint32_t(sizeof(T));
        if (run) {
            std::memcpy(d + i, from + first, 64);
        } else {
            TW_NOVEC
            for (uint32_t k = 0; k < kChunk; ++k) d[i + k] = *reinterpret_cast<const T*>(from + offsets[i + k]);
        }
    }
    TW_NOVEC
    for (; i < count; ++i) d[i] = *reinterpret_cast<const T*>(from + offsets[i]);
}

// dst[0] = the float sum of src[0, count) in a fixed lane order, as a vector unit sums (not index
// order, which cannot vectorize): lane j of 64 accumulates elements j, j + 64, j + 128, ...; then
// the lane sums are added pairwise (lane j + w into lane j for w = 32, 16, ..., 1). The order
// does not depend on the host's vector width, so neither does the result.
template <typename T>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count)
{
    static_assert(twin::kFloating<T>, "ReduceSum: unsupported data type");
    (void)sharedTmpBuffer;
    twin::CheckLocal("ReduceSum", src, count);
    twin::CheckLocal("ReduceSum", dst, 1);
    constexpr int32_t kLanes = 64;
    const T* s = src.TwData();
    float lanes[kLanes] = {};
    int32_t i = 0;
    twin::PumpCheap(uint64_t(count) * sizeof(T));
    for (; i + kLanes <= count; i += kLanes) {
        TW_IVDEP
        for (int32_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<float>(s[i + j]);
    }
    if (i < count) {
        // The tail as a whole chunk padded with -0.0f, the identity of float addition, so the
        // lanes past the end keep their sums. Only constant indices into `lanes`: the compiler
        // keeps the 64 lanes in registers instead of going through memory on every chunk.
        float tail[kLanes];
        for (int32_t j = 0; j < kLanes; ++j) tail[j] = i + j < count ? static_cast<float>(s[i + j]) : -0.0f;
        for (int32_t j = 0; j < kLanes; ++j) lanes[j] += tail[j];
    }
    for (int32_t w = kLanes / 2; w > 0; w /= 2) {
        for (int32_t j = 0; j < w; ++j) lanes[j] += lanes[j + w];
    }
    dst.TwData()[0] = static_cast<T>(lanes[0]);
}

// dst[0] = max; with calIndex, dst[1] holds the first index of the max as raw integer bits.
template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& sharedTmpBuffer,
                      const int32_t count, bool calIndex = false)
{
    static_assert(twin::kFloating<T>, "ReduceMax: unsupported data type");
    (void)sharedTmpBuffer;
    if (count < 1) twin::Fail("ReduceMax: count must be at least 1, got ", count);
    twin::CheckLocal("ReduceMax", src, count);
    twin::CheckLocal("ReduceMax", dst, calIndex ? 2 : 1);
    const T* s = src.TwData();
    int32_t best = 0;
    for (int32_t i = 1; i < count; ++i) {
        if (s[i] > s[best]) best = i;
    }
    dst.TwData()[0] = s[best];
    if (calIndex) {
        if constexpr (sizeof(T) == 4) {
            uint32_t bits = uint32_t(best);
            std::memcpy(dst.TwData() + 1, &bits, 4);
        } else {
            uint16_t bits = uint16_t(best);
            std::memcpy(dst.TwData() + 1, &bits, 2);
        }
    }
}

}  // namespace AscendC

namespace twin {

inline half HalfStep(half h, bool up)
{
    uint16_t b;
    std::memcpy(&b, &h, 2);
    if ((b & 0x7FFF) == 0) {
        b = up ? 0x0001 : 0x8001;
    } else if ((b & 0x8000) == 0) {
        b = up ? b + 1 : b - 1;
    } else {
        b = up ? b - 1 : b + 1;
    }
    std::memcpy(&h, &b, 2);
    return h;
}
inline float Step(float f, bool up) { return std::nextafter(f, up ? INFINITY : -INFINITY); }
inline half Step(half h, bool up) { return HalfStep(h, up); }
inline bool OddLsb(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b & 1; }
inline bool OddLsb(half h) { uint16_t b; std::memcpy(&b, &h, 2); return b & 1; }

// `v` (exact in S) rounded to the floating type D with the given mode.
template <typename D, typename S>
inline D RoundTo(S v, AscendC::RoundMode mode)
{
    using AscendC::RoundMode;
    D nearest = static_cast<D>(v);  // round to nearest even
    if (mode == RoundMode::CAST_NONE || mode == RoundMode::CAST_RINT || v != v ||
        static_cast<S>(nearest) == v) {
        return nearest;
    }
    bool below = static_cast<S>(nearest) < v;
    D lo = below ? nearest : Step(nearest, false);
    D hi = below ? Step(nearest, true) : nearest;
    switch (mode) {
        case RoundMode::CAST_FLOOR: return lo;
        case RoundMode::CAST_CEIL: return hi;
        case RoundMode::CAST_TRUNC: return v > 0 ? lo : hi;
        case RoundMode::CAST_ODD: return OddLsb(lo) ? lo : hi;
        case RoundMode::CAST_ROUND: {
            S dLo = v - static_cast<S>(lo), dHi = static_cast<S>(hi) - v;
            if (dLo == dHi) return v > 0 ? hi : lo;  // ties away from zero
            return nearest;
        }
        default: return nearest;
    }
}

inline float RoundInt(float v, AscendC::RoundMode mode)
{
    using AscendC::RoundMode;
    switch (mode) {
        case RoundMode::CAST_FLOOR: return std::floor(v);
        case RoundMode::CAST_CEIL: return std::ceil(v);
        case RoundMode::CAST_ROUND: return std::round(v);
        case RoundMode::CAST_TRUNC: return std::trunc(v);
        default: return std::nearbyint(v);
    }
}

// Saturating float -> int32 (NaN -> 0), as the vector unit does.
inline int32_t SaturateInt32(float v)
{
    if (v != v) return 0;
    if (v >= 2147483648.0f) return INT32_MAX;
    if (v <= -2147483648.0f) return INT32_MIN;
    return static_cast<int32_t>(v);
}

template <typename D, typename S, typename F>
inline void CastLoop(const AscendC::LocalTensor<D>& dst, const AscendC::LocalTensor<S>& src, uint32_t count, F f)
{
    CheckLocal("Cast", dst, count);
    CheckLocal("Cast", src, count);
    D* d = dst.TwData();
    const S* s = src.TwData();
    PumpCheap(uint64_t(count) * sizeof(S));
    TW_IVDEP
    for (uint32_t i = 0; i < count; ++i) d[i] = f(s[i]);
}

}  // namespace twin

namespace AscendC {

// Supported: float<->half, float/half->int32, int32->float/half, uint8->half. CAST_NONE is
// CAST_RINT (round half to even) whenever precision is lost.
template <typename D, typename S>
inline void Cast(const LocalTensor<D>& dst, const LocalTensor<S>& src, const RoundMode& roundMode,
                 const uint32_t count)
{
    const RoundMode m = roundMode;
    const bool nearest = m == RoundMode::CAST_NONE || m == RoundMode::CAST_RINT;
    if constexpr (std::is_same_v<S, half> && std::is_same_v<D, float>) {
        twin::CastLoop(dst, src, count, [](half v) { return static_cast<float>(v); });
    } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, half>) {
        if (nearest) {
            twin::CastLoop(dst, src, count, [](float v) { return static_cast<half>(v); });
        } else {
            twin::CastLoop(dst, src, count, [m](float v) { return twin::RoundTo<half>(v, m); });
        }
    } else if constexpr ((std::is_same_v<S, float> || std::is_same_v<S, half>) && std::is_same_v<D, int32_t>) {
        twin::CastLoop(dst, src, count,
                       [m](S v) { return twin::SaturateInt32(twin::RoundInt(static_cast<float>(v), m)); });
    } else if constexpr (std::is_same_v<S, int32_t> && (std::is_same_v<D, float> || std::is_same_v<D, half>)) {
        if (nearest) {
            twin::CastLoop(dst, src, count, [](int32_t v) { return static_cast<D>(static_cast<double>(v)); });
        } else {
            twin::CastLoop(dst, src, count, [m](int32_t v) { return twin::RoundTo<D>(static_cast<double>(v), m); });
        }
    } else if constexpr (std::is_same_v<S, uint8_t> && std::is_same_v<D, half>) {
        twin::CastLoop(dst, src, count, [](uint8_t v) { return static_cast<half>(v); });
    } else {
        static_assert(sizeof(D) == 0, "Cast: unsupported pair of data types");
    }
}

}  // namespace AscendC

#if defined(__clang__)
#pragma clang diagnostic pop
#endif
