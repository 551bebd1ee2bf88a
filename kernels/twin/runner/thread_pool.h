// The host's thread pool behind TwHost.parallel_for, shared by the twin runner and the
// in-process launcher (host_pool.cpp), so that blocks run on host cores the same way in both.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace twin_host {

// Persistent workers; the calling thread takes part. Indices are handed out by an atomic counter.
// One ParallelFor at a time: its callers serialise (the runner serves one request at a time, the
// in-process launcher holds a lock around each launch).
class ThreadPool {
public:
    explicit ThreadPool(unsigned threads)
    {
        for (unsigned w = 1; w < threads; ++w) workers_.emplace_back([this, w] { Work(w); });
    }
    ~ThreadPool()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto& t : workers_) t.join();
    }
    unsigned Threads() const { return unsigned(workers_.size()) + 1; }

    static void ParallelFor(void* impl, uint32_t n, void (*fn)(void*, uint32_t), void* arg)
    {
        static_cast<ThreadPool*>(impl)->Run(n, fn, arg);
    }

private:
    void Run(uint32_t n, void (*fn)(void*, uint32_t), void* arg)
    {
        uint32_t helpers = std::min<uint32_t>(n > 0 ? n - 1 : 0, uint32_t(workers_.size()));
        {
            std::lock_guard<std::mutex> lock(mutex_);
            fn_ = fn;
            arg_ = arg;
            n_ = n;
            next_.store(0);
            helpers_ = helpers;
            pending_ = helpers;
            ++generation_;
        }
        if (helpers > 0) wake_.notify_all();
        Drain();
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_ == 0; });
    }

    void Drain()
    {
        for (uint32_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) fn_(arg_, i);
    }

    void Work(unsigned id)
    {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return stop_ || (generation_ != seen && id <= helpers_); });
                if (stop_) return;
                seen = generation_;
            }
            Drain();
            {
                std::lock_guard<std::mutex> lock(mutex_);
                --pending_;
            }
            done_.notify_one();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    bool stop_ = false;
    uint64_t generation_ = 0;
    uint32_t helpers_ = 0, pending_ = 0, n_ = 0;
    void (*fn_)(void*, uint32_t) = nullptr;
    void* arg_ = nullptr;
    std::atomic<uint32_t> next_{0};
};

}  // namespace twin_host
