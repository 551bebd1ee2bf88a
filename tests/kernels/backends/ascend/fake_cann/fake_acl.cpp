// Fake ACL for tests: device memory is host memory, events are host clock readings.
// FAKE_ACL_SYNC_ERROR=<code> makes aclrtSynchronizeStream fail with that aclError, and so does a
// kernel that called fake_acl_fail (the twin-backed fake kernels), once.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "acl/acl.h"

namespace {
const char* g_recent = nullptr;
aclError g_pending = ACL_SUCCESS;
std::string g_message;
}

extern "C" {
aclError aclInit(const char*) { return ACL_SUCCESS; }
aclError aclFinalize() { return ACL_SUCCESS; }
aclError aclrtSetDevice(int32_t deviceId) { return deviceId >= 0 && deviceId < 8 ? ACL_SUCCESS : 107001; }
aclError aclrtResetDevice(int32_t) { return ACL_SUCCESS; }
aclError aclrtCreateStream(aclrtStream* stream)
{
    static int dummy;
    *stream = &dummy;
    return ACL_SUCCESS;
}
aclError aclrtDestroyStream(aclrtStream) { return ACL_SUCCESS; }
void fake_acl_fail(aclError code, const char* message)
{
    g_message = message;
    g_recent = g_message.c_str();
    g_pending = code;
}
aclError aclrtSynchronizeStream(aclrtStream)
{
    if (g_pending != ACL_SUCCESS) {
        aclError code = g_pending;
        g_pending = ACL_SUCCESS;
        return code;
    }
    const char* code = std::getenv("FAKE_ACL_SYNC_ERROR");
    if (code != nullptr && *code != '\0') {
        g_recent = "EZ9999: Inner Error! the ub address out of bounds (fake)";
        return std::atoi(code);
    }
    return ACL_SUCCESS;
}
aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy)
{
    *devPtr = std::malloc(size);
    return *devPtr != nullptr ? ACL_SUCCESS : 207001;
}
aclError aclrtFree(void* devPtr)
{
    std::free(devPtr);
    return ACL_SUCCESS;
}
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind)
{
    if (count > destMax) {
        return 100000;
    }
    std::memcpy(dst, src, count);
    return ACL_SUCCESS;
}
aclError aclrtCreateEvent(aclrtEvent* event)
{
    *event = new std::chrono::steady_clock::time_point();
    return ACL_SUCCESS;
}
aclError aclrtDestroyEvent(aclrtEvent event)
{
    delete static_cast<std::chrono::steady_clock::time_point*>(event);
    return ACL_SUCCESS;
}
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream)
{
    *static_cast<std::chrono::steady_clock::time_point*>(event) = std::chrono::steady_clock::now();
    return ACL_SUCCESS;
}
aclError aclrtEventElapsedTime(float* ms, aclrtEvent startEvent, aclrtEvent endEvent)
{
    auto* a = static_cast<std::chrono::steady_clock::time_point*>(startEvent);
    auto* b = static_cast<std::chrono::steady_clock::time_point*>(endEvent);
    *ms = std::chrono::duration<float, std::milli>(*b - *a).count();
    return ACL_SUCCESS;
}
const char* aclGetRecentErrMsg() { return g_recent; }
}
