// A deliberately faulty Ascend C kernel for the reliability tests (tests/reliability).
// Compile time, FAULT_BUILD: 0 builds, 1 includes a header that does not exist (a build
// failure), 2 includes "stall.fifo", a named pipe nobody writes (the compiler never finishes).
// Run time, tiling.mode: 0, 4, 5 copy x to y (three ways), 1 writes through a null GM pointer
// (SIGSEGV), 2 calls abort() (SIGABRT), 3 never returns (a hang).
#if FAULT_BUILD == 1
#include "tilewise_no_such_header.h"
#elif FAULT_BUILD == 2
#include "stall.fifo"
#endif

#include <cstdlib>
#include <thread>

#include "kernel_operator.h"
using namespace AscendC;

struct FaultTiling {
    int32_t length;
    int32_t mode;
};

extern "C" __global__ __aicore__ void faults(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, FaultTiling tiling)
{
    (void)workspace;
    if (tiling.mode == 1) {
        volatile float* nowhere = nullptr;
        *nowhere = 1.0f;
    }
    if (tiling.mode == 2) {
        std::abort();
    }
    while (tiling.mode == 3) {
        std::this_thread::yield();
    }
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, tiling.length);
    yGm.SetGlobalBuffer((__gm__ float*)y, tiling.length);
    if (tiling.mode == 4) {
        for (int32_t i = tiling.length - 1; i >= 0; --i) {
            yGm.SetValue(i, xGm.GetValue(i));
        }
        return;
    }
    const int32_t step = tiling.mode == 5 ? 2 : 1;
    for (int32_t first = 0; first < step; ++first) {
        for (int32_t i = first; i < tiling.length; i += step) {
            yGm.SetValue(i, xGm.GetValue(i));
        }
    }
}
