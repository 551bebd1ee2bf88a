// Test stub of CANN's tikicpulib.h (CPU debug mode): the names the tilewise host runner uses.
#ifndef TILEWISE_STUB_TIKICPULIB_H
#define TILEWISE_STUB_TIKICPULIB_H

#include <cstddef>
#include <cstdint>

#define __global__
#define __aicore__
#define GM_ADDR uint8_t*

enum class KernelMode { MIX_MODE, AIC_MODE, AIV_MODE };

namespace AscendC {
void* GmAlloc(size_t size);
void GmFree(void* ptr);
void SetKernelMode(KernelMode mode);
}  // namespace AscendC

#define ICPU_RUN_KF(func, blockDim, ...) ((void)(blockDim), func(__VA_ARGS__))

#endif
