// High-level activation APIs. All compute in float and round once to the destination type.
#pragma once

#include "vec.h"

// Loops marked TW_IVDEP that cannot vectorize (libm calls, rounding-mode switches) stay scalar.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

namespace twin {

template <typename T, typename F>
inline void Activation(const char* what, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                       uint32_t count, F f)
{
    static_assert(kFloating<T>, "activation: unsupported data type");
    CheckLocal(what, dst, count);
    CheckLocal(what, src, count);
    T* d = dst.TwData();
    const T* s = src.TwData();
    Strips(count, kStripElems * sizeof(T) / 64, [&](uint32_t begin, uint32_t end) {
        TW_IVDEP_LONG
        for (uint32_t i = begin; i < end; ++i) d[i] = static_cast<T>(f(static_cast<float>(s[i])));
    });
}

// e^(-z) for the sigmoid family, to about 1e-7 relative (NaN stays NaN). Leaner than Exp, which
// the Exp instruction keeps to 2 ulp: -z is clamped to [-87.33654, 88] by a max and a min that
// pass NaN through, so 2^n is a normal float without a cap on n, and a degree-5 polynomial (fitted
// for relative error on [-ln2/2, ln2/2]) stands for e^r. 16 vector operations instead of 24; the
// activations were two thirds of layernorm_gelu's and swiglu's time on an AVX-512 Zen 4.
inline float ExpNeg(float z)
{
    float m = -z;
    m = -87.33654f > m ? -87.33654f : m;
    m = 88.0f < m ? 88.0f : m;
    const float t = m * 1.44269504088896341f + kExpShifter;
    const float n = t - kExpShifter;
    const float r = m - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 8.26153066e-3f;
    p = p * r + 4.18987311e-2f;
    p = p * r + 1.66681141e-1f;
    p = p * r + 4.99991417e-1f;
    p = p * r + 9.99999523e-1f;
    p = p * r + 1.0f;
    return p * Pow2OfShifted(t);
}

// x / (1 + e^(-z)) = x * sigmoid(z), the shape of every activation here. (A division-free
// reciprocal is no faster: the divider runs beside the exp's multiply-adds.)
inline float TimesSigmoid(float x, float z) { return x / (1.0f + ExpNeg(z)); }

// x * sigmoid(1.5957691 * (x + 0.044715 x^3)), the tanh form of GELU, with the constants folded:
// z = x * (1.5957691 + 0.0713548 x^2).
inline float GeluTanh(float x) { return TimesSigmoid(x, x * (1.5957691f + 0.0713548163f * x * x)); }

}  // namespace twin

namespace AscendC {

template <typename T, bool highPrecision = false, bool highPerformance = false>
inline void Gelu(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const uint32_t dataSize)
{
    twin::Activation("Gelu", dstLocal, srcLocal, dataSize, [](float x) { return twin::GeluTanh(x); });
}

template <typename T, bool highPrecision = false, bool highPerformance = false>
inline void Gelu(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal,
                 const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t dataSize)
{
    (void)sharedTmpBuffer;
    twin::Activation("Gelu", dstLocal, srcLocal, dataSize, [](float x) { return twin::GeluTanh(x); });
}

template <typename T, bool highPrecision = false, bool highPerformance = false>
inline void FasterGelu(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const uint32_t dataSize)
{
    twin::Activation("FasterGelu", dstLocal, srcLocal, dataSize,
                     [](float x) { return twin::TimesSigmoid(x, 1.702f * x); });
}

template <typename T, bool highPrecision = false, bool highPerformance = false>
inline void FasterGelu(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal,
                       const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t dataSize)
{
    (void)sharedTmpBuffer;
    FasterGelu<T, highPrecision, highPerformance>(dstLocal, srcLocal, dataSize);
}

template <typename T, bool isReuseSource = false>
inline void Silu(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, uint32_t dataSize)
{
    twin::Activation("Silu", dstLocal, srcLocal, dataSize, [](float x) { return twin::TimesSigmoid(x, x); });
}

template <typename T, bool isReuseSource = false>
inline void Swish(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, uint32_t dataSize,
                  const T& scalarValue)
{
    const float beta = static_cast<float>(scalarValue);
    twin::Activation("Swish", dstLocal, srcLocal, dataSize,
                     [beta](float x) { return twin::TimesSigmoid(x, beta * x); });
}

template <typename T, bool isReuseSource = false>
inline void Sigmoid(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal, const uint32_t calCount)
{
    twin::Activation("Sigmoid", dstLocal, srcLocal, calCount, [](float x) { return twin::TimesSigmoid(1.0f, x); });
}

template <typename T, bool isReuseSource = false>
inline void Sigmoid(const LocalTensor<T>& dstLocal, const LocalTensor<T>& srcLocal,
                    const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount)
{
    (void)sharedTmpBuffer;
    Sigmoid<T, isReuseSource>(dstLocal, srcLocal, calCount);
}

// dst = src0 * swish_beta(src1) = src0 * src1 / (1 + exp(-beta * src1)).
template <typename T, bool isReuseSource = false>
inline void SwiGLU(const LocalTensor<T>& dstTensor, const LocalTensor<T>& srcTensor0,
                   const LocalTensor<T>& srcTensor1, const float& scalarValue, const uint32_t calCount)
{
    static_assert(twin::kFloating<T>, "SwiGLU: unsupported data type");
    const char* what = "SwiGLU";
    twin::CheckLocal(what, dstTensor, calCount);
    twin::CheckLocal(what, srcTensor0, calCount);
    twin::CheckLocal(what, srcTensor1, calCount);
    twin::CheckDisjoint(what, dstTensor, srcTensor0, calCount);
    twin::CheckDisjoint(what, dstTensor, srcTensor1, calCount);
    T* d = dstTensor.TwData();
    const T* a = srcTensor0.TwData();
    const T* b = srcTensor1.TwData();
    const float beta = scalarValue;
    twin::Strips(calCount, 2 * twin::kStripElems * sizeof(T) / 64, [&](uint32_t begin, uint32_t end) {
        TW_IVDEP_LONG
        for (uint32_t i = begin; i < end; ++i) {
            float g = static_cast<float>(b[i]);
            d[i] = static_cast<T>(static_cast<float>(a[i]) * twin::TimesSigmoid(g, beta * g));
        }
    });
}

template <typename T, bool isReuseSource = false>
inline void SwiGLU(const LocalTensor<T>& dstTensor, const LocalTensor<T>& srcTensor0,
                   const LocalTensor<T>& srcTensor1, const float& scalarValue,
                   const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount)
{
    (void)sharedTmpBuffer;
    SwiGLU<T, isReuseSource>(dstTensor, srcTensor0, srcTensor1, scalarValue, calCount);
}

}  // namespace AscendC

#if defined(__clang__)
#pragma clang diagnostic pop
#endif
