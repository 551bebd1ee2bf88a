// A deliberately faulty Ascend C kernel for the runner's fault handling tests:
// mode 0 copies x to y, mode 1 dereferences a null GM pointer, mode 2 never returns.
#include <thread>

#include "kernel_operator.h"
using namespace AscendC;

struct FaultTiling {
    int32_t length;
    int32_t mode;
};

extern "C" __global__ __aicore__ void fault(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, FaultTiling tiling)
{
    (void)workspace;
    if (tiling.mode == 1) {
        volatile float* nowhere = nullptr;
        *nowhere = 1.0f;
    }
    while (tiling.mode == 2) {
        std::this_thread::yield();
    }
    GlobalTensor<float> xGm, yGm;
    xGm.SetGlobalBuffer((__gm__ float*)x, tiling.length);
    yGm.SetGlobalBuffer((__gm__ float*)y, tiling.length);
    for (int32_t i = 0; i < tiling.length; ++i) {
        yGm.SetValue(i, xGm.GetValue(i));
    }
}
