// Host stand-in for scale_relu_dropout behind the aclrtlaunch_ signature, for the fake CANN.
// It computes the op from the tiling fields it is given, so a tiling struct garbled on its way
// through the host runner gives a wrong answer. FAKE_KERNEL_WRONG=1 makes it write zeros.
#include <cstdlib>
#include <cstring>

#include "scale_relu_dropout_tiling.h"
#include "aclrtlaunch_scale_relu_dropout.h"

static_assert(sizeof(DTYPE_X) == 4, "the fake kernel is float32 only");

extern "C" uint32_t aclrtlaunch_scale_relu_dropout(uint32_t blockDim, aclrtStream, void* x, void* y, void*,
                                                   ScaleReluDropoutTiling tiling)
{
    if (blockDim == 0 || tiling.blockLength * static_cast<int32_t>(blockDim) < tiling.totalLength) {
        return 100000;
    }
    const float* in = static_cast<const float*>(x);
    float* out = static_cast<float*>(y);
    bool wrong = std::getenv("FAKE_KERNEL_WRONG") != nullptr;
    for (int32_t i = 0; i < tiling.totalLength; ++i) {
        uint32_t h = static_cast<uint32_t>(i) + tiling.seedMix;
        h *= 0x85EBCA6Bu;
        for (int round = 0; round < 2; ++round) {
            h += h >> 16;
            h *= h;
        }
        bool keep = static_cast<float>(static_cast<int32_t>(h)) > tiling.dropP * 4294967296.0f - 2147483648.0f;
        float v = in[i] * (tiling.scale * tiling.keepScale);
        v = v > 0.0f ? v : 0.0f;
        out[i] = wrong || !keep ? 0.0f : v;
    }
    return 0;
}
