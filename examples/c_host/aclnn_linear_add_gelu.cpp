// The two phases of aclnnLinearAddGelu; see aclnn_linear_add_gelu.h.
#include "aclnn_linear_add_gelu.h"

#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "runner/thread_pool.h"  // the twin's host thread pool (kernels/twin/runner)
#include "tilewise_linear_add_gelu.h"  // TILEWISE_NOT_FOUND
#include "twin_abi.h"

// The kernel on the twin, linked in from kernel_twin.cpp (TWIN_EXPORT_KERNEL).
extern "C" const char* tw_run(uint8_t* const* gm, int32_t n_gm, const void* tiling, uint32_t tiling_bytes,
                              uint32_t block_dim, const TwCoreLimits* limits, const TwHost* host);

struct aclOpExecutor {
    LinearAddGeluPlan plan;
    uint8_t* gm[5];  // x, w, bias, out, workspace (the last given at launch)
    uint64_t workspaceSize;
};

namespace {

// What the kernel's SetSysWorkspace takes on the twin (tilewise's gm_args: 1 KiB). On an NPU
// this is the Matmul API's system workspace, PlatformAscendC::GetLibApiWorkSpaceSize().
constexpr uint64_t kWorkspaceBytes = 1024;
constexpr uint32_t kBtBytes = 1024;  // Ascend910B1's bias table

thread_local std::string lastError;
std::mutex optionsMutex;
LinearAddGeluOptions options;

LinearAddGeluOptions Options()
{
    std::lock_guard<std::mutex> lock(optionsMutex);
    return options;
}

aclnnStatus Fail(aclnnStatus status, const std::string& message)
{
    lastError = message;
    return status;
}

// A float32 tensor of the given rank and positive dims, as aclnn's parameter checks want it.
bool CheckTensor(const aclTensor* t, const char* name, int32_t rank, std::string& why)
{
    if (t->dtype != ACL_FLOAT) {
        why = std::string(name) + ": only float32 is built into this example";
        return false;
    }
    if (t->rank != rank) {
        why = std::string(name) + ": expected " + std::to_string(rank) + " dims, got " + std::to_string(t->rank);
        return false;
    }
    for (int32_t i = 0; i < rank; ++i) {
        if (t->dims[i] < 1 || t->dims[i] > INT32_MAX) {
            why = std::string(name) + ": dim " + std::to_string(i) + " is " + std::to_string(t->dims[i]);
            return false;
        }
    }
    return true;
}

twin_host::ThreadPool& Pool()
{
    static twin_host::ThreadPool pool(std::thread::hardware_concurrency() > 0 ? std::thread::hardware_concurrency()
                                                                              : 1);
    return pool;
}

}  // namespace

const char* aclGetRecentErrMsg() { return lastError.c_str(); }

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor)
{
    delete executor;
    return ACLNN_SUCCESS;
}

void LinearAddGeluSetOptions(const LinearAddGeluOptions& given)
{
    std::lock_guard<std::mutex> lock(optionsMutex);
    options = given;
}

const LinearAddGeluPlan* LinearAddGeluExecutorPlan(const aclOpExecutor* executor)
{
    return executor == nullptr ? nullptr : &executor->plan;
}

aclnnStatus aclnnLinearAddGeluGetWorkspaceSize(const aclTensor* x, const aclTensor* w, const aclTensor* bias,
                                               aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor)
{
    if (x == nullptr || w == nullptr || bias == nullptr || out == nullptr || workspaceSize == nullptr ||
        executor == nullptr) {
        return Fail(ACLNN_ERR_PARAM_NULLPTR, "x, w, bias, out, workspaceSize and executor must not be null");
    }
    std::string why;
    if (!CheckTensor(x, "x", 2, why) || !CheckTensor(w, "w", 2, why) || !CheckTensor(bias, "bias", 1, why) ||
        !CheckTensor(out, "out", 2, why)) {
        return Fail(ACLNN_ERR_PARAM_INVALID, why);
    }
    const int64_t m = x->dims[0], k = x->dims[1], n = w->dims[1];
    if (w->dims[0] != k || bias->dims[0] != n || out->dims[0] != m || out->dims[1] != n) {
        return Fail(ACLNN_ERR_PARAM_INVALID, "shapes do not agree: x [M, K], w [K, N], bias [N], out [M, N]");
    }
    if (x->data == nullptr || w->data == nullptr || bias->data == nullptr || out->data == nullptr) {
        return Fail(ACLNN_ERR_PARAM_NULLPTR, "a tensor has no data");
    }

    // The TilingFunc: table or default, then the kernel's struct and launch size.
    const lag_host::Platform platform = lag_host::TwinPlatform();
    const LinearAddGeluOptions chosen = Options();
    lag_host::TilingDecision decision{};
    if (chosen.given) {
        decision.tunables = chosen.tiling;
        decision.source = lag_host::TilingSource::kGiven;
        decision.tableAnswer = TILEWISE_NOT_FOUND;
    } else {
        decision = lag_host::ChooseTiling(m, n, k, platform, chosen.useTable);
    }
    const std::string broken = lag_host::CheckTiling(decision.tunables, m, n, k, 4, platform);
    if (!broken.empty()) {  // a given tiling that does not fit, or no default that does
        return Fail(ACLNN_ERR_INNER_TILING_ERROR, "tiling not valid for this shape: " + broken);
    }
    auto* exec = new (std::nothrow) aclOpExecutor{};
    if (exec == nullptr) return Fail(ACLNN_ERR_RUNTIME_ERROR, "out of host memory");
    exec->plan.decision = decision;
    exec->plan.tiling = lag_host::FillTilingData(decision.tunables, m, n, k);
    exec->plan.blockDim = lag_host::BlockDim(decision.tunables, m, n, platform);
    exec->gm[0] = static_cast<uint8_t*>(x->data);
    exec->gm[1] = static_cast<uint8_t*>(w->data);
    exec->gm[2] = static_cast<uint8_t*>(bias->data);
    exec->gm[3] = static_cast<uint8_t*>(out->data);
    exec->workspaceSize = kWorkspaceBytes;
    *workspaceSize = kWorkspaceBytes;
    *executor = exec;
    return ACLNN_SUCCESS;
}

aclnnStatus aclnnLinearAddGelu(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, aclrtStream stream)
{
    (void)stream;  // the twin runs the launch on host threads and returns when it is done
    if (executor == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "executor is null");
    if (workspaceSize < executor->workspaceSize || workspace == nullptr) {
        const std::string need = std::to_string(executor->workspaceSize);
        delete executor;
        return Fail(ACLNN_ERR_PARAM_INVALID, "the workspace must hold the " + need + " bytes the first phase asked");
    }
    executor->gm[4] = static_cast<uint8_t*>(workspace);
    const lag_host::Platform p = lag_host::TwinPlatform();
    const TwCoreLimits limits = {uint32_t(p.ub),  uint32_t(p.l1), uint32_t(p.l0a),
                                 uint32_t(p.l0b), uint32_t(p.l0c), kBtBytes,
                                 Options().checked ? 1u : 0u};
    static std::mutex launches;  // the pool runs one launch at a time
    const char* error = nullptr;
    {
        std::lock_guard<std::mutex> lock(launches);
        TwHost host{&twin_host::ThreadPool::ParallelFor, &Pool()};
        // The twin runs vector blocks: those of each AI core of the MIX launch, as the device does.
        error = tw_run(executor->gm, 5, &executor->plan.tiling, uint32_t(sizeof(executor->plan.tiling)),
                       lag_host::VectorBlocksPerCore(p) * executor->plan.blockDim, &limits, &host);
    }
    delete executor;  // an aclnn executor serves one launch
    if (error != nullptr) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("kernel failed: ") + error);
    return ACLNN_SUCCESS;
}
