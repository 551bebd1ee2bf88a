// Compare and Select in count form: element-wise tests packed into bit masks, and selection by
// such a mask.
//
// A mask is a uint8 LocalTensor, one bit per element, little-endian: element i is bit i % 8 of
// byte i / 8. Compare and CompareScalar take a count whose bytes are whole 256 B vector repeats
// (64 float or 128 half elements), as the hardware's count form asserts; Select takes any count
// its mask covers.
#pragma once

#include <cstring>
#include <type_traits>

#include "tensor.h"
#include "vec.h"

namespace AscendC {

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

}  // namespace AscendC

namespace twin {

constexpr uint64_t kRepeatBytes = 256;  // one vector repeat: the unit of a count-form compare

// What a compare computes in: half in float, integers as themselves (signed stays signed).
template <typename T>
inline auto AsCompared(T v) { return static_cast<std::conditional_t<std::is_integral_v<T>, T, float>>(v); }

template <typename T>
inline void CheckCompareCount(const char* what, uint32_t count)
{
    if (uint64_t(count) * sizeof(T) % kRepeatBytes != 0) {
        Fail(what, ": count ", count, " (", uint64_t(count) * sizeof(T), " B) is not a whole number of ",
             kRepeatBytes, " B repeats; round it up to a multiple of ", kRepeatBytes / sizeof(T), " elements");
    }
}

#if defined(__clang__)
// 16 floats are wider than AVX2's registers: without AVX-512, clang warns that passing them by
// value changes the calling convention. That matters between separately compiled objects; these
// helpers are inline in each kernel's one translation unit, and the lambdas below are called
// from PackCompare only.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpsabi"
template <typename T, int N>
using VecOf = T __attribute__((ext_vector_type(N)));
using Bits16 = bool __attribute__((ext_vector_type(16)));  // stored as 16 packed bits

// 16 elements from p as the type they are compared in.
template <typename T>
inline auto Lanes16(const T* p)
{
    VecOf<T, 16> v;
    std::memcpy(&v, p, sizeof(v));
    return __builtin_convertvector(v, VecOf<decltype(AsCompared(T{})), 16>);
}
#endif

// dst bit i = cmp(a[i], b[i]) (or cmp(a[i], scalar) when b is null) for i < count, a multiple of
// 64. With clang, 16 lanes are compared as one vector and the result stored as 16 bits (a compare
// into a mask register and a 16-bit store). The portable form ORs bits into a word, which clang
// compiled to a horizontal OR reduction per 64 elements: CompareScalar then cost more than an
// arithmetic pass that reads and writes the tile.
template <typename T, typename Cmp>
inline void PackCompare(uint8_t* d, const T* a, const T* b, T scalar, uint32_t count, Cmp cmp)
{
#if defined(__clang__)
    const auto s = AsCompared(scalar);
    for (uint32_t i = 0; i < count; i += 16) {
        const Bits16 bits = b != nullptr ? __builtin_convertvector(cmp(Lanes16(a + i), Lanes16(b + i)), Bits16)
                                         : __builtin_convertvector(cmp(Lanes16(a + i), s), Bits16);
        std::memcpy(d + i / 8, &bits, 2);
    }
#else
    for (uint32_t i = 0; i < count; i += 64) {
        uint64_t word = 0;
        for (uint32_t j = 0; j < 64; ++j) {
            const auto x = AsCompared(a[i + j]);
            word |= uint64_t(cmp(x, b != nullptr ? AsCompared(b[i + j]) : AsCompared(scalar))) << j;
        }
        std::memcpy(d + i / 8, &word, 8);  // little-endian host: byte k holds bits 8k .. 8k + 7
    }
#endif
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

// The mode is fixed per call: dispatch once, so each loop body is a plain comparison.
template <typename T>
inline void CompareLoop(const char* what, const AscendC::LocalTensor<uint8_t>& dst, AscendC::CMPMODE mode,
                        uint32_t count, const T* a, const T* b, T scalar)
{
    using AscendC::CMPMODE;
    CheckLocal(what, dst, count / 8);
    uint8_t* d = dst.TwData();
    switch (mode) {
        case CMPMODE::LT: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x < y; }); break;
        case CMPMODE::GT: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x > y; }); break;
        case CMPMODE::EQ: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x == y; }); break;
        case CMPMODE::LE: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x <= y; }); break;
        case CMPMODE::GE: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x >= y; }); break;
        case CMPMODE::NE: PackCompare(d, a, b, scalar, count, [](auto x, auto y) { return x != y; }); break;
        default: Fail(what, ": unknown CMPMODE ", int(mode));
    }
}

inline bool MaskBit(const uint8_t* mask, uint32_t i)
{
    return (mask[i / 8] >> (i % 8)) & 1u;
}

// dst[i] = mask bit i ? src0[i] : other(i), for `sources` tensors read per element.
template <typename T, typename U, typename Other>
inline void SelectLoop(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<U>& selMask,
                       const AscendC::LocalTensor<T>& src0, uint32_t count, uint32_t sources, Other other)
{
    static_assert(kFloating<T>, "Select: unsupported data type");
    static_assert(std::is_same_v<U, uint8_t>, "Select: the twin takes uint8_t masks");
    CheckLocal("Select", dst, count);
    CheckLocal("Select", src0, count);
    CheckLocal("Select", selMask, (uint64_t(count) + 7) / 8);
    T* d = dst.TwData();
    const T* a = src0.TwData();
    const uint8_t* m = selMask.TwData();
    PumpCheap(uint64_t(count) * sources * sizeof(T));
    // Both sides are read whatever the bit: written as `bit ? a[i] : ...` the read of a[i] is
    // conditional, which AVX2 turns into vmaskmovps, a microcoded load that made this loop 3.5x
    // the cost of any other pass on a Zen 1 EPYC.
    TW_IVDEP
    for (uint32_t i = 0; i < count; ++i) {
        const T chosen = a[i], otherwise = other(i);
        d[i] = MaskBit(m, i) ? chosen : otherwise;
    }
}

}  // namespace twin

namespace AscendC {

// dst bit i = src0[i] <cmpMode> src1[i]. half and float; int32 only with EQ (as on A2 and A3:
// asc-devkit's Compare page lists int32_t for CMPMODE::EQ only, as for CompareScalar).
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                    CMPMODE cmpMode, uint32_t count)
{
    static_assert(std::is_same_v<U, uint8_t>, "Compare: the mask must be uint8_t");
    static_assert(twin::kFloating<T> || std::is_same_v<T, int32_t>, "Compare: unsupported data type");
    if (std::is_same_v<T, int32_t> && cmpMode != CMPMODE::EQ) {
        twin::Fail("Compare: int32_t supports CMPMODE::EQ only, got mode ", int(cmpMode));
    }
    twin::CheckCompareCount<T>("Compare", count);
    twin::CheckLocal("Compare", src0, count);
    twin::CheckLocal("Compare", src1, count);
    const T* a = src0.TwData();
    const T* b = src1.TwData();
    twin::PumpCheap(uint64_t(count) * 2 * sizeof(T));
    twin::CompareLoop<T>("Compare", dst, cmpMode, count, a, b, T(0));
}

// dst bit i = src0[i] <cmpMode> src1Scalar. half and float; int32 only with EQ (as on A2).
template <typename T, typename U>
inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar,
                          CMPMODE cmpMode, uint32_t count)
{
    static_assert(std::is_same_v<U, uint8_t>, "CompareScalar: the mask must be uint8_t");
    static_assert(twin::kFloating<T> || std::is_same_v<T, int32_t>, "CompareScalar: unsupported data type");
    if (std::is_same_v<T, int32_t> && cmpMode != CMPMODE::EQ) {
        twin::Fail("CompareScalar: int32_t supports CMPMODE::EQ only, got mode ", int(cmpMode));
    }
    twin::CheckCompareCount<T>("CompareScalar", count);
    twin::CheckLocal("CompareScalar", src0, count);
    twin::PumpCheap(uint64_t(count) * sizeof(T));
    twin::CompareLoop<T>("CompareScalar", dst, cmpMode, count, src0.TwData(), nullptr, src1Scalar);
}

// dst[i] = mask bit i ? src0[i] : src1 (VSEL_TENSOR_SCALAR_MODE). half and float.
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint32_t count)
{
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        twin::Fail("Select with a scalar: selMode must be VSEL_TENSOR_SCALAR_MODE, got ", int(selMode));
    }
    twin::SelectLoop(dst, selMask, src0, count, 1, [src1](uint32_t) { return src1; });
}

// dst[i] = mask bit i ? src0[i] : src1[i]. Only VSEL_TENSOR_TENSOR_MODE: the twin has no
// compare-mask register (SetCmpMask), so VSEL_CMPMASK_SPR is refused with a message.
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   const LocalTensor<T>& src1, SELMODE selMode, uint32_t count)
{
    if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        twin::Fail("Select with two tensors: the twin supports VSEL_TENSOR_TENSOR_MODE only, got ", int(selMode));
    }
    twin::CheckLocal("Select", src1, count);
    const T* b = src1.TwData();
    twin::SelectLoop(dst, selMask, src0, count, 2, [b](uint32_t i) { return b[i]; });
}

}  // namespace AscendC
