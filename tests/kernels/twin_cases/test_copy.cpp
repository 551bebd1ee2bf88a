// DataCopy / DataCopyPad: the 32-byte rule, bounds, strides and padding.
#include <vector>

#include "check.h"

using namespace AscendC;

struct Fixture {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    LocalTensor<float> local;
    std::vector<float> gm = std::vector<float>(256);
    GlobalTensor<float> global;

    explicit Fixture(uint32_t localBytes = 1024)
    {
        pipe.InitBuffer(buf, localBytes);
        local = buf.Get<float>();
        for (size_t i = 0; i < gm.size(); ++i) gm[i] = float(i);
        global.SetGlobalBuffer(gm.data(), gm.size());
    }
};

static void CheckedRejectsPartialBlocks()
{
    FreshCore();
    Fixture f;
    EXPECT_ERROR(DataCopy(f.local, f.global, 7), "count 7 x 4 B = 28 B is not a multiple of 32 B");
    EXPECT_ERROR(DataCopy(f.global, f.local, 12), "count 12 x 4 B = 48 B");
    DataCopy(f.local, f.global, 16);
    CHECK(f.local.GetValue(15) == 15.0f, "copied value");
    Pass("checked_rejects_partial_blocks");
}

static void UncheckedRoundsDown()
{
    TwCoreLimits limits = twin::kDefaultLimits;
    limits.checked = 0;
    FreshCore(limits);
    Fixture f;
    Duplicate(f.local, -1.0f, 32);
    DataCopy(f.local, f.global, 12);  // 48 B -> 32 B
    CHECK(f.local.GetValue(7) == 7.0f && f.local.GetValue(8) == -1.0f, "got %g %g", f.local.GetValue(7),
          f.local.GetValue(8));
    DataCopy(f.global[100], f.local, 15);  // 60 B -> 32 B
    CHECK(f.gm[107] == 7.0f && f.gm[108] == 108.0f, "got %g %g", f.gm[107], f.gm[108]);
    Pass("unchecked_rounds_down");
}

static void BoundsAndAlignment()
{
    FreshCore();
    Fixture f(64);
    EXPECT_ERROR(DataCopy(f.local, f.global, 24), "24 elements exceed the LocalTensor size 16");
    GlobalTensor<float> small;
    small.SetGlobalBuffer(f.gm.data(), 8);
    EXPECT_ERROR(DataCopy(f.local, small, 16), "16 elements exceed the GlobalTensor size 8");
    EXPECT_ERROR(DataCopy(f.local[4], f.global, 8), "local address 16 is not 32-byte aligned");
    EXPECT_ERROR(Adds(f.local[1], f.local[1], 1.0f, 4), "not 32-byte aligned");
    Pass("bounds_and_alignment");
}

static void StridedDataCopy()
{
    FreshCore();
    Fixture f;
    Duplicate(f.local, -1.0f, 256);
    // 3 blocks of 8 floats; GM gap 1 block (8 floats), UB gap 2 blocks.
    DataCopy(f.local, f.global, DataCopyParams(3, 1, 1, 2));
    for (int b = 0; b < 3; ++b) {
        for (int i = 0; i < 8; ++i) {
            CHECK(f.local.GetValue(b * 24 + i) == float(b * 16 + i), "block %d elem %d", b, i);
        }
        if (b < 2) CHECK(f.local.GetValue(b * 24 + 8) == -1.0f, "gap untouched");
    }
    DataCopy(f.global[128], f.local, DataCopyParams{2, 1, 2, 0});  // UB gap 2 blocks, GM dense
    CHECK(f.gm[128 + 8] == 16.0f && f.gm[128 + 15] == 23.0f, "got %g", f.gm[136]);
    Pass("strided_datacopy");
}

static void DataCopyPadBothWays()
{
    FreshCore();
    Fixture f;
    Duplicate(f.local, -1.0f, 256);
    // 3 rows of 5 floats (20 B), GM rows 7 floats apart (gap 8 B), UB rows 32 B + 1 block gap.
    DataCopyPad(f.local, f.global, DataCopyExtParams{3, 20, 8, 1, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 5; ++i) CHECK(f.local.GetValue(r * 16 + i) == float(r * 7 + i), "row %d elem %d", r, i);
        CHECK(f.local.GetValue(r * 16 + 5) == -1.0f, "no pad without isPad");
    }
    DataCopyPad(f.local[64], f.global, DataCopyExtParams{1, 12, 0, 0, 0},
                DataCopyPadExtParams<float>{true, 2, 3, 9.0f});
    const float want[8] = {9, 9, 0, 1, 2, 9, 9, 9};
    for (int i = 0; i < 8; ++i) CHECK(f.local.GetValue(64 + i) == want[i], "pad elem %d = %g", i, f.local.GetValue(64 + i));
    // Back: 3 rows of 5 floats from UB rows 16 floats apart (32 B data + 1 block gap) to GM rows 6 apart.
    DataCopyPad(f.global[200], f.local, DataCopyExtParams{3, 20, 1, 4, 0});
    for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 5; ++i) CHECK(f.gm[200 + r * 6 + i] == float(r * 7 + i), "out row %d elem %d", r, i);
    }
    CHECK(f.gm[205] == 205.0f, "GM gap untouched");
    EXPECT_ERROR(DataCopyPad(f.global[250], f.local, DataCopyExtParams{1, 40, 0, 0, 0}),
                 "10 elements exceed the GlobalTensor size 6");
    Pass("datacopypad_both_ways");
}

// The prefetcher's guess of the next copy: the same span again right after, or a stride that
// repeated twice running (channels of an image: one plane apart).
static void PrefetchStridePrediction()
{
    FreshCore();
    twin::Prefetcher p;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(0x10000);
    CHECK(p.NextStride(base, 64) == 64, "first copy: sequential");
    CHECK(p.NextStride(base + 64, 64) == 64, "one step of 64: still the span");
    CHECK(p.NextStride(base + 1000, 64) == 64, "a new stride, seen once: the span");
    CHECK(p.NextStride(base + 1936, 64) == 936, "936 twice running: the stride");
    CHECK(p.NextStride(base + 2872, 64) == 936, "and again");
    CHECK(p.NextStride(base + 3000, 64) == 64, "another stride: the span");
    CHECK(p.NextStride(base + 100, 64) == 64, "a step back breaks the stride");
    p.Clear();
    CHECK(p.NextStride(base + 1036, 64) == 64, "Clear forgets the stride");
    Pass("prefetch_stride_prediction");
}

int main()
{
    CheckedRejectsPartialBlocks();
    UncheckedRoundsDown();
    BoundsAndAlignment();
    StridedDataCopy();
    DataCopyPadBothWays();
    PrefetchStridePrediction();
    return 0;
}
