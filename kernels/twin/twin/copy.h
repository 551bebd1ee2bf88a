// DataCopy and DataCopyPad between GM and the core's local memories.
//
// DataCopy moves whole 32 B blocks. Checked mode rejects a count that is not a whole number of
// blocks; unchecked mode rounds it down silently, as the hardware does. DataCopyPad moves any
// byte count: its UB side keeps each block 32 B aligned; strides on the GM side are in bytes and on
// the local side in 32 B blocks (the hardware's convention).
#pragma once

#include "tensor.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace AscendC {

struct DataCopyParams {
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;   // 32 B blocks
    uint16_t srcStride = 0;  // gap between blocks, 32 B blocks
    uint16_t dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStrideIn, uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
};

struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;   // bytes
    uint32_t srcStride = 0;  // gap between blocks: bytes on GM, 32 B blocks on the local side
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t srcStrideIn, uint32_t dstStrideIn,
                      uint32_t rsvIn = 0)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
};

template <typename T>
struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;   // elements
    uint8_t rightPadding = 0;  // elements
    T paddingValue = 0;
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool pad, uint8_t left, uint8_t right, T value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};

}  // namespace AscendC

namespace twin {

// Bytes moved by a count-form DataCopy of `count` elements of T.
template <typename T>
inline uint64_t CopyBytes(const char* what, uint32_t count)
{
    uint64_t bytes = uint64_t(count) * sizeof(T);
    if (bytes % 32 != 0 && Checked()) {
        Fail(what, ": count ", count, " x ", sizeof(T), " B = ", bytes,
             " B is not a multiple of 32 B (hardware rounds down to ", bytes / 32 * 32, " B)");
    }
    return bytes / 32 * 32;
}

// Blocks of `len` bytes; block i at src + i*srcPitch and dst + i*dstPitch.
inline void CopyBlocks(uint8_t* dst, const uint8_t* src, uint32_t count, uint64_t len,
                       uint64_t dstPitch, uint64_t srcPitch)
{
    for (uint32_t i = 0; i < count; ++i) std::memmove(dst + i * dstPitch, src + i * srcPitch, len);
}

// GM -> local with vector loads (memmove's rep movsb is slower on these AMD cores).
inline void LoadRun(uint8_t* dst, const uint8_t* src, uint64_t len)
{
#if defined(__AVX512F__)
    uint64_t i = 0;
    for (; i + 64 <= len; i += 64) {
        _mm512_storeu_si512(reinterpret_cast<void*>(dst + i),
                            _mm512_loadu_si512(reinterpret_cast<const void*>(src + i)));
    }
    std::memcpy(dst + i, src + i, len - i);
#else
    std::memcpy(dst, src, len);
#endif
}

// What a copy from `src` (a GlobalTensor view) that read `span` bytes expects to read next: as
// many bytes again, right after or one repeated stride on (Prefetcher::NextStride), within the
// tensor when its size is known.
template <typename T>
inline void ExpectNext(const AscendC::GlobalTensor<T>& src, uint64_t span)
{
    const auto* start = reinterpret_cast<const uint8_t*>(src.TwData());
    const uint64_t stride = uint64_t(Core().prefetch.NextStride(start, span));
    uint64_t ahead = span;
    if (src.TwSized()) {
        const uint64_t size = src.GetSize() * sizeof(T);
        ahead = size > stride + span ? span : (size > stride ? size - stride : 0);
    }
    Core().prefetch.Expect(start + stride, ahead);
}

// CopyBlocks from GM to local memory (which never overlap); returns the bytes of GM spanned.
inline uint64_t CopyBlocksFromGm(uint8_t* dst, const uint8_t* src, uint32_t count, uint64_t len, uint64_t dstPitch,
                                 uint64_t srcPitch)
{
    if (count == 0) return 0;
    if (dstPitch == len && srcPitch == len) {
        LoadRun(dst, src, count * len);
    } else {
        for (uint32_t i = 0; i < count; ++i) LoadRun(dst + i * dstPitch, src + i * srcPitch, len);
    }
    return (count - 1) * srcPitch + len;
}

// Local -> GM. MTE3 writes GM without going through the vector core's cache; the twin mirrors
// that with non-temporal stores for runs of kStreamBytes or more, so a streamed output neither
// evicts the UB tiles nor pays a read for ownership. Shorter runs are plain copies.
constexpr uint64_t kStreamBytes = 2048;

inline void StreamRun(uint8_t* dst, const uint8_t* src, uint64_t len)
{
#if defined(__SSE2__)
    if (len < kStreamBytes) {
        std::memcpy(dst, src, len);
        return;
    }
    const uint64_t head = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    const uint64_t body = len / 64 * 64;
    for (uint64_t i = 0; i < body; i += 64) {
#if defined(__AVX512F__)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i),
                            _mm512_loadu_si512(reinterpret_cast<const void*>(src + i)));
#elif defined(__AVX__)
        for (int h = 0; h < 64; h += 32) {
            _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + h),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + h)));
        }
#else
        for (int h = 0; h < 64; h += 16) {
            _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + h),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + h)));
        }
#endif
    }
    std::memcpy(dst + body, src + body, len - body);
#else
    std::memcpy(dst, src, len);
#endif
}

// Non-temporal stores are weakly ordered. The core's own loads see them in program order, so one
// fence per block, before the launcher reports the block done (FenceStreams), makes them visible
// to every other thread; a fence per copy stalled each tile's copy until its stores drained.
inline void FenceStreams()
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

// CopyBlocks from local memory to GM; blocks that are contiguous on both sides move as one run.
inline void CopyBlocksToGm(uint8_t* dst, const uint8_t* src, uint32_t count, uint64_t len, uint64_t dstPitch,
                           uint64_t srcPitch)
{
    if (dstPitch == len && srcPitch == len) {
        StreamRun(dst, src, count * len);
    } else {
        for (uint32_t i = 0; i < count; ++i) StreamRun(dst + i * dstPitch, src + i * srcPitch, len);
    }
}

// Elements spanned by `count` blocks of `len` bytes laid `pitch` bytes apart.
inline uint64_t Span(uint32_t count, uint64_t len, uint64_t pitch, size_t elem)
{
    return count == 0 ? 0 : ((count - 1) * pitch + len + elem - 1) / elem;
}

}  // namespace twin

namespace AscendC {

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    uint64_t bytes = twin::CopyBytes<T>("DataCopy GM->local", count);
    twin::CheckLocal("DataCopy GM->local", dst, bytes / sizeof(T));
    src.TwCheckRange("DataCopy GM->local", bytes / sizeof(T));
    twin::CopyBlocksFromGm(reinterpret_cast<uint8_t*>(dst.TwData()), reinterpret_cast<const uint8_t*>(src.TwData()),
                           1, bytes, bytes, bytes);
    twin::ExpectNext(src, bytes);
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    uint64_t bytes = twin::CopyBytes<T>("DataCopy local->GM", count);
    twin::CheckLocal("DataCopy local->GM", src, bytes / sizeof(T));
    dst.TwCheckRange("DataCopy local->GM", bytes / sizeof(T));
    twin::CopyBlocksToGm(reinterpret_cast<uint8_t*>(dst.TwData()), reinterpret_cast<const uint8_t*>(src.TwData()), 1,
                         bytes, bytes, bytes);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    uint64_t bytes = twin::CopyBytes<T>("DataCopy local->local", count);
    twin::CheckLocal("DataCopy local->local", dst, bytes / sizeof(T));
    twin::CheckLocal("DataCopy local->local", src, bytes / sizeof(T));
    std::memmove(dst.TwData(), src.TwData(), bytes);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p)
{
    uint64_t len = uint64_t(p.blockLen) * 32;
    uint64_t srcPitch = len + uint64_t(p.srcStride) * 32, dstPitch = len + uint64_t(p.dstStride) * 32;
    twin::CheckLocal("DataCopy GM->local", dst, twin::Span(p.blockCount, len, dstPitch, sizeof(T)));
    src.TwCheckRange("DataCopy GM->local", twin::Span(p.blockCount, len, srcPitch, sizeof(T)));
    const uint64_t span = twin::CopyBlocksFromGm(reinterpret_cast<uint8_t*>(dst.TwData()),
                                                 reinterpret_cast<const uint8_t*>(src.TwData()), p.blockCount, len,
                                                 dstPitch, srcPitch);
    twin::ExpectNext(src, span);
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    uint64_t len = uint64_t(p.blockLen) * 32;
    uint64_t srcPitch = len + uint64_t(p.srcStride) * 32, dstPitch = len + uint64_t(p.dstStride) * 32;
    twin::CheckLocal("DataCopy local->GM", src, twin::Span(p.blockCount, len, srcPitch, sizeof(T)));
    dst.TwCheckRange("DataCopy local->GM", twin::Span(p.blockCount, len, dstPitch, sizeof(T)));
    twin::CopyBlocksToGm(reinterpret_cast<uint8_t*>(dst.TwData()), reinterpret_cast<const uint8_t*>(src.TwData()),
                     p.blockCount, len, dstPitch, srcPitch);
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    uint64_t len = uint64_t(p.blockLen) * 32;
    uint64_t srcPitch = len + uint64_t(p.srcStride) * 32, dstPitch = len + uint64_t(p.dstStride) * 32;
    twin::CheckLocal("DataCopy local->local", src, twin::Span(p.blockCount, len, srcPitch, sizeof(T)));
    twin::CheckLocal("DataCopy local->local", dst, twin::Span(p.blockCount, len, dstPitch, sizeof(T)));
    twin::CopyBlocks(reinterpret_cast<uint8_t*>(dst.TwData()), reinterpret_cast<const uint8_t*>(src.TwData()),
                     p.blockCount, len, dstPitch, srcPitch);
}

// GM -> local. Each local block is padded up to 32 B: left padding, data, then (when isPad) the
// padding value up to the block end; without isPad the padding bytes are left as they were.
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad)
{
    const char* what = "DataCopyPad GM->local";
    uint64_t left = pad.isPad ? uint64_t(pad.leftPadding) * sizeof(T) : 0;
    uint64_t right = pad.isPad ? uint64_t(pad.rightPadding) * sizeof(T) : 0;
    uint64_t localLen = twin::RoundUp(uint32_t(left + p.blockLen + right), 32);
    uint64_t srcPitch = uint64_t(p.blockLen) + p.srcStride;
    uint64_t dstPitch = localLen + uint64_t(p.dstStride) * 32;
    twin::CheckLocal(what, dst, twin::Span(p.blockCount, localLen, dstPitch, sizeof(T)));
    src.TwCheckRange(what, twin::Span(p.blockCount, p.blockLen, srcPitch, sizeof(T)));
    auto* out = reinterpret_cast<uint8_t*>(dst.TwData());
    const auto* in = reinterpret_cast<const uint8_t*>(src.TwData());
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint8_t* block = out + i * dstPitch;
        twin::LoadRun(block + left, in + i * srcPitch, p.blockLen);
        if (!pad.isPad) continue;
        T* elems = reinterpret_cast<T*>(block);
        for (uint64_t e = 0; e < left / sizeof(T); ++e) elems[e] = pad.paddingValue;
        for (uint64_t e = (left + p.blockLen) / sizeof(T); e < localLen / sizeof(T); ++e) {
            elems[e] = pad.paddingValue;
        }
    }
    if (p.blockCount > 0) twin::ExpectNext(src, (p.blockCount - 1) * srcPitch + p.blockLen);
}

// local -> GM: block i starts at i*(blockLen rounded up to 32 B + srcStride*32) locally.
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p)
{
    const char* what = "DataCopyPad local->GM";
    uint64_t localLen = twin::RoundUp(p.blockLen, 32);
    uint64_t srcPitch = localLen + uint64_t(p.srcStride) * 32;
    uint64_t dstPitch = uint64_t(p.blockLen) + p.dstStride;
    twin::CheckLocal(what, src, twin::Span(p.blockCount, p.blockLen, srcPitch, sizeof(T)));
    dst.TwCheckRange(what, twin::Span(p.blockCount, p.blockLen, dstPitch, sizeof(T)));
    twin::CopyBlocksToGm(reinterpret_cast<uint8_t*>(dst.TwData()), reinterpret_cast<const uint8_t*>(src.TwData()),
                     p.blockCount, p.blockLen, dstPitch, srcPitch);
}

}  // namespace AscendC
