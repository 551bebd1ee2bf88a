// Test stub in the shape of the aclrtlaunch_<kernel>.h that ascendc_library generates.
#ifndef HEADER_ACLRTLAUNCH_LINEAR_ADD_GELU_H
#define HEADER_ACLRTLAUNCH_LINEAR_ADD_GELU_H
#include "acl/acl_base.h"

#ifndef ACLRT_LAUNCH_KERNEL
#define ACLRT_LAUNCH_KERNEL(kernel_func) aclrtlaunch_##kernel_func
#endif

extern "C" uint32_t aclrtlaunch_linear_add_gelu(uint32_t blockDim, aclrtStream stream, void* x, void* w, void* bias, void* out, void* workspace, LinearAddGeluTiling tiling);
#endif
