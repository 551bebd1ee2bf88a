// Exports one kernel from a variant .so through the C ABI of twin_abi.h. A generated shim does:
//
//   #include "/abs/path/kernels/ops/linear_add_gelu/linear_add_gelu.cpp"
//   #include "twin_launch.h"
//   TWIN_EXPORT_KERNEL(linear_add_gelu, LinearAddGeluTiling, 5)  // kernel, tiling type, GM args
//   TWIN_CHECK_FIELD(LinearAddGeluTiling, cube.baseM, 32)        // byte offset the host relies on
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "kernel_operator.h"
#include "twin_abi.h"

// The C ABI of a variant: the only symbols it exports (variants build with -fvisibility=hidden,
// so calls inside the twin and the kernel bind directly, without the PLT).
#define TW_EXPORT extern "C" __attribute__((visibility("default")))

namespace twin {

using KernelCall = void (*)(uint8_t* const* gm, const void* tiling);

struct Launch {
    uint8_t* const* gm;
    const void* tiling;
    uint32_t blockDim;
    TwCoreLimits limits;
    KernelCall call;
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::string error;

    void Record(uint32_t block, const char* what)
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (error.empty()) error = "block " + std::to_string(block) + ": " + what;
        failed.store(true, std::memory_order_relaxed);
    }
};

// One block on the calling thread. After a failure the remaining blocks are skipped. The block's
// streamed GM writes are fenced before it counts as done.
inline void RunBlock(void* arg, uint32_t block)
{
    auto* launch = static_cast<Launch*>(arg);
    if (launch->failed.load(std::memory_order_relaxed)) return;
    try {
        BeginBlock(block, launch->blockDim, launch->limits);
        launch->call(launch->gm, launch->tiling);
    } catch (const std::exception& e) {
        launch->Record(block, e.what());
    } catch (...) {
        launch->Record(block, "unknown exception");
    }
    FenceStreams();
}

// The body of tw_run once the tiling is in its struct. A null host runs the blocks in order.
inline const char* RunKernel(KernelCall call, uint8_t* const* gm, const void* tiling, uint32_t blockDim,
                             const TwCoreLimits* limits, const TwHost* host)
{
    static std::string lastError;
    if (limits == nullptr) return (lastError = "tw_run: limits is null").c_str();
    if (blockDim == 0) return (lastError = "tw_run: block_dim is 0").c_str();
    Launch launch;
    launch.gm = gm;
    launch.tiling = tiling;
    launch.blockDim = blockDim;
    launch.limits = *limits;
    launch.call = call;
    if (host != nullptr && host->parallel_for != nullptr) {
        host->parallel_for(host->impl, blockDim, &RunBlock, &launch);
    } else {
        for (uint32_t i = 0; i < blockDim; ++i) RunBlock(&launch, i);
    }
    if (launch.error.empty()) return nullptr;
    lastError = launch.error;
    return lastError.c_str();
}

template <typename Kernel, typename Tiling, size_t... I>
inline void CallKernel(Kernel kernel, uint8_t* const* gm, const Tiling& tiling, std::index_sequence<I...>)
{
    kernel(gm[I]..., tiling);
}

inline const char* ArgumentError(const char* what, uint64_t got, uint64_t want)
{
    static std::string message;
    message = std::string("tw_run: ") + what + " is " + std::to_string(got) + ", the kernel expects " +
              std::to_string(want);
    return message.c_str();
}

}  // namespace twin

#define TWIN_EXPORT_KERNEL(kernel, TilingType, nGm)                                                       \
    static_assert(std::is_trivially_copyable<TilingType>::value, #TilingType " must be a POD struct");    \
    TW_EXPORT int tw_abi_version(void) { return TW_ABI_VERSION; }                                         \
    TW_EXPORT uint32_t tw_tiling_bytes(void) { return uint32_t(sizeof(TilingType)); }                     \
    TW_EXPORT int32_t tw_gm_args(void) { return (nGm); }                                                  \
    static void tw_call_##kernel(uint8_t* const* gm, const void* tiling)                                  \
    {                                                                                                     \
        ::twin::CallKernel(kernel, gm, *static_cast<const TilingType*>(tiling),                           \
                           std::make_index_sequence<(nGm)>{});                                            \
    }                                                                                                     \
    TW_EXPORT const char* tw_run(uint8_t* const* gm, int32_t n_gm, const void* tiling,                    \
                                 uint32_t tiling_bytes, uint32_t block_dim, const TwCoreLimits* limits,   \
                                 const TwHost* host)                                                      \
    {                                                                                                     \
        if (n_gm != (nGm)) return ::twin::ArgumentError("n_gm", uint64_t(n_gm), (nGm));                   \
        if (tiling_bytes != sizeof(TilingType)) {                                                         \
            return ::twin::ArgumentError("tiling_bytes", tiling_bytes, sizeof(TilingType));               \
        }                                                                                                 \
        TilingType copy;                                                                                  \
        std::memcpy(&copy, tiling, sizeof(TilingType));                                                   \
        return ::twin::RunKernel(&tw_call_##kernel, gm, &copy, block_dim, limits, host);                  \
    }

#define TWIN_CHECK_FIELD(TilingType, field, offset)                                                       \
    static_assert(offsetof(TilingType, field) == (offset), #TilingType "." #field " is not at byte " #offset);
