// tilewise host pool: the runner's thread pool as a shared library, so that a Python process can
// launch variants (see twin_abi.h) itself, with their blocks on all host cores as in the runner.
//
//   void*    tw_pool_create(uint32_t threads);        a pool of `threads` threads (the caller's
//                                                     thread counts as one); NULL on failure
//   void     tw_pool_host(void* pool, TwHost* host);  the TwHost to hand to a variant's tw_run
//   uint32_t tw_pool_threads(void* pool);
//   void     tw_pool_destroy(void* pool);
//
// One tw_run at a time per pool (see thread_pool.h): the caller serialises the launches.
// Build: clang++-19 -std=c++17 -O2 -pthread -fPIC -shared host_pool.cpp -o host_pool.so
#include "../twin_abi.h"
#include "thread_pool.h"

#define TW_HOST_EXPORT extern "C" __attribute__((visibility("default")))

using twin_host::ThreadPool;

TW_HOST_EXPORT void* tw_pool_create(uint32_t threads)
{
    try {
        return new ThreadPool(threads > 0 ? threads : 1);
    } catch (...) {
        return nullptr;  // no thread could be started
    }
}

TW_HOST_EXPORT void tw_pool_host(void* pool, TwHost* host)
{
    host->parallel_for = &ThreadPool::ParallelFor;
    host->impl = pool;
}

TW_HOST_EXPORT uint32_t tw_pool_threads(void* pool) { return static_cast<ThreadPool*>(pool)->Threads(); }

TW_HOST_EXPORT void tw_pool_destroy(void* pool) { delete static_cast<ThreadPool*>(pool); }
