// TPipe / TQue / TBuf: arena limits, 32 B rounding, queue and live-tensor limits.
#include "check.h"

using namespace AscendC;

static void UbOverflowNamesSizes()
{
    FreshCore();
    TPipe pipe;
    TBuf<TPosition::VECCALC> all, more;
    pipe.InitBuffer(all, 196608);
    EXPECT_ERROR(pipe.InitBuffer(more, 1024),
                 "InitBuffer: UB overflow: requested 1024 B at offset 196608, exceeds the limit 196608 B");
    Pass("ub_overflow_names_sizes");
}

static void SmallerLimitFromLaunch()
{
    TwCoreLimits limits = twin::kDefaultLimits;
    limits.ub = 4096;
    FreshCore(limits);
    TPipe pipe;
    TQue<TPosition::VECIN, 2> q;
    EXPECT_ERROR(pipe.InitBuffer(q, 2, 4096), "requested 8192 B at offset 0, exceeds the limit 4096 B");
    Pass("ub_limit_from_launch");
}

static void InitBufferRoundsUpTo32()
{
    FreshCore();
    TPipe pipe;
    TQue<TPosition::VECIN, 2> q;
    TBuf<TPosition::VECCALC> b;
    pipe.InitBuffer(q, 2, 33);  // 2 x 64 B
    pipe.InitBuffer(b, 1);      // 32 B
    LocalTensor<float> t0 = q.AllocTensor<float>();
    LocalTensor<float> t1 = q.AllocTensor<float>();
    CHECK(t0.GetSize() == 16 && t1.GetPhyAddr() == 64, "size %u addr %lu", t0.GetSize(), (unsigned long)t1.GetPhyAddr());
    LocalTensor<uint8_t> bb = b.Get<uint8_t>();
    CHECK(bb.GetPhyAddr() == 128 && bb.GetSize() == 32, "addr %lu size %u", (unsigned long)bb.GetPhyAddr(), bb.GetSize());
    CHECK(twin::Core().Of(twin::Mem::UB).Used() == 160, "used %u", twin::Core().Of(twin::Mem::UB).Used());
    EXPECT_ERROR(b.Get<float>(9), "exceed the buffer's 32 B");
    Pass("initbuffer_rounds_up_to_32");
}

static void QueueDepthAndBuffers()
{
    FreshCore();
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    EXPECT_ERROR(q.DeQue<float>(), "DeQue: the queue is empty");
    LocalTensor<float> a = q.AllocTensor<float>();
    LocalTensor<float> b = q.AllocTensor<float>();
    EXPECT_ERROR(q.AllocTensor<float>(), "AllocTensor: all 2 buffers of the queue are in use");
    CHECK(q.EnQue(a), "first EnQue");
    CHECK(!q.EnQue(b), "EnQue beyond depth 1 must return false");
    LocalTensor<float> c = q.DeQue<float>();
    CHECK(c.TwData() == a.TwData(), "FIFO order");
    q.FreeTensor(c);
    EXPECT_ERROR(q.FreeTensor(c), "not allocated");
    q.FreeTensor(b);
    LocalTensor<float> view = q.AllocTensor<float>()[8];
    EXPECT_ERROR(q.FreeTensor(view), "does not start a buffer");
    Pass("queue_depth_and_buffers");
}

static void NinthLiveTensor()
{
    FreshCore();
    TPipe pipe;
    TQue<TPosition::VECOUT, 2> q[5];
    for (auto& one : q) pipe.InitBuffer(one, 2, 64);
    for (int i = 0; i < 8; ++i) q[i / 2].AllocTensor<half>();
    EXPECT_ERROR(q[4].AllocTensor<half>(), "more than 8 live tensors at position VECOUT");
    Pass("ninth_live_tensor");
}

static void SixtyFiveBuffers()
{
    FreshCore();
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q[9];
    for (int i = 0; i < 8; ++i) pipe.InitBuffer(q[i], 8, 32);
    EXPECT_ERROR(pipe.InitBuffer(q[8], 1, 32), "more than 64 buffers");
    Pass("sixty_five_buffers");
}

static void L1Positions()
{
    TwCoreLimits limits = twin::kDefaultLimits;
    limits.l1 = 1024;
    FreshCore(limits);
    TPipe pipe;
    TQue<TPosition::A1, 1> a1;
    pipe.InitBuffer(a1, 1, 1000);
    TQue<TPosition::B1, 1> b1;
    EXPECT_ERROR(pipe.InitBuffer(b1, 1, 32), "InitBuffer: L1 overflow: requested 32 B at offset 1024");
    Pass("l1_positions");
}

int main()
{
    UbOverflowNamesSizes();
    SmallerLimitFromLaunch();
    InitBufferRoundsUpTo32();
    QueueDepthAndBuffers();
    NinthLiveTensor();
    SixtyFiveBuffers();
    L1Positions();
    return 0;
}
