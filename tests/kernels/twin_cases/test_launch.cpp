// The launch path of twin_launch.h: blocks on host threads, per-block state, error reporting.
#include <atomic>
#include <thread>
#include <vector>

#include "check.h"
#include "twin_launch.h"

using namespace AscendC;

struct ProbeTiling {
    int32_t ubBytes;    // UB each block asks for
    int32_t failBlock;  // this block asks for one byte more than the UB has (-1: none)
};

// Writes (block idx, block num, thread tag) per block after using the whole requested UB.
extern "C" __global__ __aicore__ void probe(GM_ADDR out, GM_ADDR workspace, ProbeTiling tiling)
{
    (void)workspace;
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    uint32_t bytes = GetBlockIdx() == tiling.failBlock ? 192 * 1024 + 1 : tiling.ubBytes;
    pipe.InitBuffer(buf, bytes);
    LocalTensor<int32_t> t = buf.Get<int32_t>(8);
    CreateVecIndex(t, static_cast<int32_t>(GetBlockIdx() * 10), 8);
    GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(out) + GetBlockIdx() * 8, 8);
    t.SetValue(1, static_cast<int32_t>(GetBlockNum()));
    for (volatile int spin = 0; spin < 20000; ++spin) {
    }
    DataCopy(g, t, 8);
}

TWIN_EXPORT_KERNEL(probe, ProbeTiling, 2)
TWIN_CHECK_FIELD(ProbeTiling, failBlock, 4)

struct Pool {
    int threads;
};

static void ParallelFor(void* impl, uint32_t n, void (*fn)(void*, uint32_t), void* arg)
{
    auto* pool = static_cast<Pool*>(impl);
    std::atomic<uint32_t> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < pool->threads; ++w) {
        workers.emplace_back([&] {
            for (uint32_t i; (i = next.fetch_add(1)) < n;) fn(arg, i);
        });
    }
    for (auto& t : workers) t.join();
}

int main()
{
    const int blocks = 37;
    std::vector<int32_t> out(blocks * 8, -1);
    uint8_t* gm[2] = {reinterpret_cast<uint8_t*>(out.data()), nullptr};
    Pool pool{4};
    TwHost host{&ParallelFor, &pool};
    TwCoreLimits limits = twin::kDefaultLimits;
    ProbeTiling tiling{192 * 1024, -1};

    CHECK(tw_abi_version() == TW_ABI_VERSION && tw_tiling_bytes() == 8 && tw_gm_args() == 2, "exports");
    const char* err = tw_run(gm, 2, &tiling, sizeof tiling, blocks, &limits, &host);
    CHECK(err == nullptr, "%s", err);
    for (int b = 0; b < blocks; ++b) {
        CHECK(out[b * 8] == b * 10 && out[b * 8 + 1] == blocks && out[b * 8 + 7] == b * 10 + 7,
              "block %d wrote %d %d", b, out[b * 8], out[b * 8 + 1]);
    }
    Pass("all_blocks_run_with_distinct_idx");

    tiling.failBlock = 5;
    err = tw_run(gm, 2, &tiling, sizeof tiling, blocks, &limits, &host);
    CHECK(err != nullptr && std::string(err).find("block 5: InitBuffer: UB overflow: requested 196640 B") == 0,
          "got %s", err ? err : "(null)");
    Pass("block_error_reported");

    limits.ub = 1024;  // the launch's limits apply to every block
    tiling = ProbeTiling{2048, -1};
    err = tw_run(gm, 2, &tiling, sizeof tiling, 3, &limits, nullptr);
    CHECK(err != nullptr && std::string(err).find("exceeds the limit 1024 B") != std::string::npos, "got %s", err);
    limits.ub = 192 * 1024;
    err = tw_run(gm, 2, &tiling, sizeof tiling, 3, &limits, nullptr);
    CHECK(err == nullptr, "%s", err);
    Pass("limits_per_launch");

    err = tw_run(gm, 3, &tiling, sizeof tiling, 1, &limits, &host);
    CHECK(err && std::string(err) == "tw_run: n_gm is 3, the kernel expects 2", "got %s", err);
    err = tw_run(gm, 2, &tiling, 4, 1, &limits, &host);
    CHECK(err && std::string(err) == "tw_run: tiling_bytes is 4, the kernel expects 8", "got %s", err);
    Pass("argument_checks");
    return 0;
}
