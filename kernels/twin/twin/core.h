// Per-core state of the CPU twin: keywords, errors, memory arenas, block index, sync no-ops.
//
// Each host thread plays one AI core. A launch (twin_launch.h) calls twin::BeginBlock before every
// block, which empties the core's memories (UB, L1, L0A, L0B, L0C, BT) and sizes them to the
// launch's limits. Every misuse the twin detects throws twin::Error; the launcher catches it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

#include "../twin_abi.h"

#define __global__
#define __aicore__
#define __gm__
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif
#define KERNEL_TASK_TYPE_DEFAULT(type) ((void)(type))
#define KERNEL_TASK_TYPE(key, type) ((void)(key), (void)(type))

enum KernelMetaType {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};

using half = _Float16;

// Twin loops are element-wise: dst may be src exactly, never a shifted overlap.
#if defined(__clang__)
#define TW_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TW_IVDEP _Pragma("GCC ivdep")
#else
#define TW_IVDEP
#endif

// An element loop with a long body (exp, division): four vectors in flight, so that the chains of
// dependent operations of neighbouring vectors overlap (clang's cost model leaves such a loop at
// one; four ran the activations about 15% faster on AVX-512).
#if defined(__clang__)
#define TW_IVDEP_LONG _Pragma("clang loop vectorize(assume_safety) interleave_count(4)")
#else
#define TW_IVDEP_LONG TW_IVDEP
#endif

// Loops whose vectorized form is slower than scalar code (gathers of scattered elements).
#if defined(__clang__)
#define TW_NOVEC _Pragma("clang loop vectorize(disable)")
#else
#define TW_NOVEC
#endif

// Keeps bulky twin machinery (the cube engine) out of the kernel functions that call it.
#if defined(__GNUC__)
#define TW_NOINLINE __attribute__((noinline))
#else
#define TW_NOINLINE
#endif

namespace AscendC {

enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, SPM, TSCM, C2PIPE2GM, MAX,
    LCM = VECCALC, SHM = SPM,
};
using QuePosition = TPosition;

enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V,
    MTE3_MTE1, MTE1_MTE3, MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3,
    S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3, MAX,
};
using TEventID = int8_t;
using event_t = int32_t;

template <typename T, typename U>
struct IsSameType {
    static constexpr bool value = false;
};
template <typename T>
struct IsSameType<T, T> {
    static constexpr bool value = true;
};

}  // namespace AscendC

enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };

namespace twin {

// Every misuse detected by the twin; the message says what was asked and what the limit is.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] inline void Fail(const Args&... parts)
{
    std::ostringstream out;
    (out << ... << parts);
    throw Error(out.str());
}

enum class Mem : int { UB, L1, L0A, L0B, L0C, BT, COUNT };

inline const char* MemName(Mem m)
{
    static const char* const names[] = {"UB", "L1", "L0A", "L0B", "L0C", "BT"};
    return names[static_cast<int>(m)];
}

inline Mem MemOf(AscendC::TPosition pos)
{
    using AscendC::TPosition;
    switch (pos) {
        case TPosition::A1: case TPosition::B1: case TPosition::C1: case TPosition::TSCM:
            return Mem::L1;
        case TPosition::A2: return Mem::L0A;
        case TPosition::B2: return Mem::L0B;
        case TPosition::CO1: return Mem::L0C;
        case TPosition::C2: return Mem::BT;
        case TPosition::VECIN: case TPosition::VECOUT: case TPosition::VECCALC:
            return Mem::UB;
        default: Fail("position ", static_cast<int>(pos), " is not an on-chip memory");
    }
}

inline const char* PositionName(AscendC::TPosition pos)
{
    static const char* const names[] = {"GM", "A1", "A2", "B1", "B2", "C1", "C2", "CO1", "CO2",
                                        "VECIN", "VECOUT", "VECCALC", "SPM", "TSCM", "C2PIPE2GM"};
    auto i = static_cast<unsigned>(pos);
    return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

inline uint32_t RoundUp(uint32_t v, uint32_t to) { return (v + to - 1) / to * to; }

// One on-chip memory of a core: a bump allocator over host memory reused across blocks.
class Arena {
public:
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena() { std::free(base_); }

    void Reset(uint32_t limit)
    {
        if (limit > capacity_ || base_ == nullptr) {
            std::free(base_);
            capacity_ = RoundUp(limit > 64 ? limit : 64, 64);
            base_ = static_cast<uint8_t*>(std::aligned_alloc(64, capacity_));
            if (base_ == nullptr) Fail("twin: out of host memory for a ", capacity_, " B arena");
        }
        limit_ = limit;
        used_ = 0;
    }

    // Byte offset of a fresh 32 B aligned region of `bytes`.
    uint32_t Alloc(uint32_t bytes, const char* what, Mem mem)
    {
        uint64_t offset = RoundUp(used_, 32);
        if (offset + bytes > limit_) {
            Fail(what, ": ", MemName(mem), " overflow: requested ", bytes, " B at offset ", offset,
                 ", exceeds the limit ", limit_, " B");
        }
        used_ = static_cast<uint32_t>(offset + bytes);
        return static_cast<uint32_t>(offset);
    }

    uint8_t* At(uint32_t offset) const { return base_ + offset; }
    uint32_t Limit() const { return limit_; }
    uint32_t Used() const { return used_; }

private:
    uint8_t* base_ = nullptr;
    uint32_t capacity_ = 0, limit_ = 0, used_ = 0;
};

// The twin's stand-in for MTE2 loading ahead of the vector unit. The device overlaps the copy of
// tile i+1 with the compute on tile i; the twin runs in program order, so a copy from GM notes the
// range it expects to be read next (the same span again right after it: the next tile of a
// stream), and the vector ops that follow prefetch it a little at a time as they work. Spread
// out, the misses stay within what a core keeps in flight and DRAM latency hides behind compute;
// the next copy then reads the cache. Prefetches never fault and change no value, so a wrong
// guess costs bandwidth only.
class Prefetcher {
public:
    static constexpr uint32_t kStreams = 4;  // GM inputs of one tile (the oldest guess goes first)

    void Expect(const uint8_t* from, uint64_t bytes)
    {
        next_[slot_] = from;
        pending_ += bytes - left_[slot_];
        left_[slot_] = bytes;
        slot_ = (slot_ + 1) % kStreams;
    }

    void Clear()
    {
        for (uint64_t& n : left_) n = 0;
        pending_ = 0;
        lastStart_ = nullptr;
        lastStride_ = 0;
    }

    // Where the copy after one that starts at `start` and spans `span` bytes will start: `span`
    // further on (the next tile of a stream), unless the copies so far stepped by the same other
    // stride twice running (one plane, row or channel of a tensor apart), as MTE2's address
    // generator would be told to.
    int64_t NextStride(const uint8_t* start, uint64_t span)
    {
        const int64_t stride = lastStart_ == nullptr ? 0 : start - lastStart_;
        const bool repeats = stride > 0 && stride == lastStride_;
        lastStart_ = start;
        lastStride_ = stride;
        return repeats ? stride : int64_t(span);
    }

    // Up to `lines` cache lines of the expected ranges, oldest range first.
    void Pump(uint64_t lines)
    {
        if (pending_ == 0) return;
        for (uint32_t k = 0; k < kStreams && lines > 0; ++k) {
            const uint32_t s = (slot_ + k) % kStreams;
            for (; left_[s] > 0 && lines > 0; --lines) {
                __builtin_prefetch(next_[s], 0, 2);
                const uint64_t step = left_[s] < 64 ? left_[s] : 64;
                next_[s] += step;
                left_[s] -= step;
                pending_ -= step;
            }
        }
    }

private:
    const uint8_t* next_[kStreams] = {};
    uint64_t left_[kStreams] = {};
    uint64_t pending_ = 0;
    uint32_t slot_ = 0;
    const uint8_t* lastStart_ = nullptr;
    int64_t lastStride_ = 0;
};

constexpr int kMaxLivePerPosition = 8;
constexpr int kMaxBuffersPerPipe = 64;
constexpr int kPositionCount = static_cast<int>(AscendC::TPosition::MAX);

// Ascend910B per-core sizes: the defaults for code that runs the API outside a launch (tests).
constexpr TwCoreLimits kDefaultLimits = {192 * 1024, 512 * 1024, 64 * 1024, 64 * 1024,
                                         128 * 1024, 1024, 1};

struct CoreState {
    int64_t blockIdx = 0;
    int64_t blockNum = 1;
    bool checked = true;
    uint8_t* sysWorkspace = nullptr;
    void* pipe = nullptr;  // the live TPipe, for GetTPipePtr()
    int32_t pipeBuffers = 0;
    int32_t live[kPositionCount] = {};
    Arena mem[static_cast<int>(Mem::COUNT)];
    Prefetcher prefetch;

    CoreState() { Reset(0, 1, kDefaultLimits); }

    void Reset(int64_t idx, int64_t num, const TwCoreLimits& lim)
    {
        blockIdx = idx;
        blockNum = num;
        checked = lim.checked != 0;
        sysWorkspace = nullptr;
        pipe = nullptr;
        pipeBuffers = 0;
        for (int32_t& n : live) n = 0;
        prefetch.Clear();
        const uint32_t sizes[] = {lim.ub, lim.l1, lim.l0a, lim.l0b, lim.l0c, lim.bt};
        for (int i = 0; i < static_cast<int>(Mem::COUNT); ++i) mem[i].Reset(sizes[i]);
    }

    Arena& Of(Mem m) { return mem[static_cast<int>(m)]; }
};

inline CoreState& Core()
{
    static thread_local CoreState state;
    return state;
}

// Called by the launcher before each block: the core starts with empty memories.
inline void BeginBlock(int64_t blockIdx, int64_t blockNum, const TwCoreLimits& limits)
{
    Core().Reset(blockIdx, blockNum, limits);
}

inline bool Checked() { return Core().checked; }

// How much the prefetcher fetches while a vector op runs. A core drains about one DRAM miss per
// 15-20 cycles (the misses it keeps in flight over the latency), so the share follows the op's
// compute: a cheap pass (~2 cycles per 64 B vector) fetches one line per kCheapShare lines it
// reads, all before it starts; an op that evaluates exp fetches as many lines as it reads, a few
// before each strip of kStripElems, so that a tile's activation alone covers the next tile.
constexpr uint64_t kCheapShare = 8;
constexpr uint32_t kStripElems = 256;

inline void PumpCheap(uint64_t bytesRead) { Core().prefetch.Pump(bytesRead / 64 / kCheapShare); }

// body(begin, end) over [0, count) in strips, prefetching `lines` cache lines before each.
template <typename Body>
inline void Strips(uint32_t count, uint32_t lines, Body body)
{
    Prefetcher& prefetch = Core().prefetch;
    for (uint32_t begin = 0; begin < count; begin += kStripElems) {
        prefetch.Pump(lines);
        body(begin, count - begin < kStripElems ? count : begin + kStripElems);
    }
}

}  // namespace twin

namespace AscendC {

inline int64_t GetBlockIdx() { return twin::Core().blockIdx; }
inline int64_t GetBlockNum() { return twin::Core().blockNum; }
// A twin core is cube and vector at once: one vector sub-block per block.
inline int64_t GetSubBlockIdx() { return 0; }
inline int64_t GetTaskRation() { return 1; }
inline void SetSysWorkspace(GM_ADDR workspace) { twin::Core().sysWorkspace = workspace; }
inline GM_ADDR GetSysWorkSpacePtr() { return twin::Core().sysWorkspace; }
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) { return workspace; }

// The twin runs every pipe in program order, so synchronisation is a no-op.
template <pipe_t pipe>
inline void PipeBarrier() {}
template <HardEvent event>
inline void SetFlag(int32_t /*eventID*/) {}
template <HardEvent event>
inline void WaitFlag(int32_t /*eventID*/) {}
inline void SyncAll() {}

}  // namespace AscendC
