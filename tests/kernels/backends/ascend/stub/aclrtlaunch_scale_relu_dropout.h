// Test stub in the shape of the aclrtlaunch_<kernel>.h that ascendc_library generates.
#ifndef HEADER_ACLRTLAUNCH_SCALE_RELU_DROPOUT_H
#define HEADER_ACLRTLAUNCH_SCALE_RELU_DROPOUT_H
#include "acl/acl_base.h"

#ifndef ACLRT_LAUNCH_KERNEL
#define ACLRT_LAUNCH_KERNEL(kernel_func) aclrtlaunch_##kernel_func
#endif

extern "C" uint32_t aclrtlaunch_scale_relu_dropout(uint32_t blockDim, aclrtStream stream, void* x, void* y, void* workspace, ScaleReluDropoutTiling tiling);
#endif
