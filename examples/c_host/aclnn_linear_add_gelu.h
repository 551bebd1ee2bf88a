// linear_add_gelu behind CANN's two-phase aclnn interface:
//
//   aclnnLinearAddGeluGetWorkspaceSize(x, w, bias, out, &workspaceSize, &executor);  // tiling
//   aclnnLinearAddGelu(workspace, workspaceSize, executor, stream);                    // launch
//
// The first phase checks the tensors, runs the op's TilingFunc (the tuned table through the
// generated header, else the default heuristic) and returns the workspace the launch needs and
// an executor holding the tiling; the second launches the kernel with that workspace and frees
// the executor, as aclnn's do.
//
// No CANN headers exist on this machine: aclTensor, aclOpExecutor, aclrtStream and the status
// codes below are plain stand-ins with CANN's names and codes, not CANN's definitions. A tensor
// is a host pointer with a shape (row-major, contiguous); the "device" is tilewise's CPU twin,
// where the kernel runs on host threads and the launch returns when it has finished.
#pragma once

#include <cstdint>

#include "linear_add_gelu_tiling.h"

using aclnnStatus = int32_t;
constexpr aclnnStatus ACLNN_SUCCESS = 0;
constexpr aclnnStatus ACLNN_ERR_PARAM_NULLPTR = 161001;
constexpr aclnnStatus ACLNN_ERR_PARAM_INVALID = 161002;
constexpr aclnnStatus ACLNN_ERR_RUNTIME_ERROR = 361001;
constexpr aclnnStatus ACLNN_ERR_INNER_TILING_ERROR = 561002;

enum aclDataType { ACL_FLOAT = 0, ACL_FLOAT16 = 1 };

// Stand-in for aclTensor (aclCreateTensor's data pointer, dtype and view shape).
struct aclTensor {
    void* data;
    aclDataType dtype;
    int64_t dims[4];
    int32_t rank;
};

using aclrtStream = void*;

// What the first phase decided (opaque, as in CANN): the caller only passes it on.
struct aclOpExecutor;

aclnnStatus aclnnLinearAddGeluGetWorkspaceSize(const aclTensor* x, const aclTensor* w, const aclTensor* bias,
                                               aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);

aclnnStatus aclnnLinearAddGelu(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream);

// Frees an executor that will not be launched.
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor);

// The reason of the last failure on this thread (aclGetRecentErrMsg's role).
const char* aclGetRecentErrMsg();

// Not part of aclnn: the first phase's decision, for printing (valid until the launch).
struct LinearAddGeluPlan {
    lag_host::TilingDecision decision;
    lag_host::LinearAddGeluTilingData tiling;
    uint32_t blockDim;
};
const LinearAddGeluPlan* LinearAddGeluExecutorPlan(const aclOpExecutor* executor);

// Not part of aclnn either: where the first phase takes its tiling from (the table, the
// default, the caller's tiling, checked as any other) and whether the launch runs in the twin's
// checked mode (the 32-byte rule, alignment and GM bounds are errors; slower). Set between calls.
struct LinearAddGeluOptions {
    bool useTable = true;  // false: the op's default heuristic
    bool checked = true;
    bool given = false;    // true: `tiling` below, for every shape
    lag_host::Tunables tiling{};
};
void LinearAddGeluSetOptions(const LinearAddGeluOptions& options);
