// TPipe, TQue and TBuf: buffers carved from the core's memories, queues between pipeline stages.
#pragma once

#include "tensor.h"

namespace twin {

// Buffers of one queue and their states; the FIFO order of EnQue/DeQue.
class QueState {
public:
    enum : uint8_t { kFree, kHeld, kQueued };

    void Attach(AscendC::TPosition pos, uint8_t* base, uint32_t addr, int32_t num, uint32_t len)
    {
        if (base_ != nullptr) Fail("InitBuffer: the queue already has buffers");
        pos_ = pos;
        base_ = base;
        addr_ = addr;
        num_ = num;
        len_ = len;
        for (int32_t i = 0; i < num; ++i) state_[i] = kFree;
    }

    template <typename T>
    AscendC::LocalTensor<T> Alloc()
    {
        if (base_ == nullptr) Fail("AllocTensor: queue has no buffers (call InitBuffer first)");
        for (int32_t i = 0; i < num_; ++i) {
            if (state_[i] != kFree) continue;
            int32_t& live = Core().live[static_cast<int>(pos_)];
            if (live >= kMaxLivePerPosition) {
                Fail("AllocTensor: more than ", kMaxLivePerPosition, " live tensors at position ",
                     PositionName(pos_));
            }
            ++live;
            state_[i] = kHeld;
            return AscendC::LocalTensor<T>::TwMake(reinterpret_cast<T*>(base_ + i * len_),
                                                   len_ / uint32_t(sizeof(T)), addr_ + i * len_, pos_);
        }
        Fail("AllocTensor: all ", num_, " buffers of the queue are in use");
    }

    // false when the queue already holds `depth` tensors.
    bool Enqueue(const void* data, int32_t depth)
    {
        int32_t i = Find("EnQue", data, kHeld);
        if (count_ >= (depth > 0 ? depth : num_)) return false;
        state_[i] = kQueued;
        fifo_[(head_ + count_) % kMaxBuffersPerPipe] = static_cast<int8_t>(i);
        ++count_;
        return true;
    }

    template <typename T>
    AscendC::LocalTensor<T> Dequeue()
    {
        if (count_ == 0) Fail("DeQue: the queue is empty");
        int32_t i = fifo_[head_];
        head_ = (head_ + 1) % kMaxBuffersPerPipe;
        --count_;
        state_[i] = kHeld;
        return AscendC::LocalTensor<T>::TwMake(reinterpret_cast<T*>(base_ + i * len_),
                                               len_ / uint32_t(sizeof(T)), addr_ + i * len_, pos_);
    }

    void Free(const void* data)
    {
        int32_t i = Find("FreeTensor", data, kHeld);
        state_[i] = kFree;
        --Core().live[static_cast<int>(pos_)];
    }

    int32_t Queued() const { return count_; }

private:
    int32_t Find(const char* what, const void* data, uint8_t wanted) const
    {
        for (int32_t i = 0; i < num_; ++i) {
            if (base_ + i * len_ != data) continue;
            if (state_[i] != wanted) {
                Fail(what, ": buffer ", i, " of the queue is ",
                     state_[i] == kFree ? "not allocated" : "still queued");
            }
            return i;
        }
        Fail(what, ": the tensor does not start a buffer of this queue");
    }

    AscendC::TPosition pos_ = AscendC::TPosition::VECIN;
    uint8_t* base_ = nullptr;
    uint32_t addr_ = 0, len_ = 0;
    int32_t num_ = 0, head_ = 0, count_ = 0;
    uint8_t state_[kMaxBuffersPerPipe] = {};
    int8_t fifo_[kMaxBuffersPerPipe] = {};
};

}  // namespace twin

namespace AscendC {

template <TPosition pos, int32_t depth>
class TQue {
public:
    static constexpr TPosition kPosition = pos;

    template <typename T>
    LocalTensor<T> AllocTensor() { return state_.template Alloc<T>(); }
    template <typename T>
    bool EnQue(const LocalTensor<T>& tensor) { return state_.Enqueue(tensor.TwData(), depth); }
    template <typename T>
    LocalTensor<T> DeQue() { return state_.template Dequeue<T>(); }
    template <typename T>
    void FreeTensor(LocalTensor<T>& tensor) { state_.Free(tensor.TwData()); }
    bool VacantInQue() const { return state_.Queued() < depth; }
    bool HasTensorInQue() const { return state_.Queued() > 0; }

    twin::QueState& TwState() { return state_; }

private:
    twin::QueState state_;
};

template <TPosition src, TPosition dst, int32_t depth>
class TQueBind : public TQue<src, depth> {};

template <TPosition pos>
class TBuf {
public:
    static constexpr TPosition kPosition = pos;

    template <typename T>
    LocalTensor<T> Get() const { return Get<T>(len_ / uint32_t(sizeof(T))); }

    template <typename T>
    LocalTensor<T> Get(uint32_t len) const
    {
        if (base_ == nullptr) twin::Fail("TBuf::Get: the buffer has no memory (call InitBuffer first)");
        if (uint64_t(len) * sizeof(T) > len_) {
            twin::Fail("TBuf::Get(", len, "): ", uint64_t(len) * sizeof(T), " B exceed the buffer's ",
                       len_, " B");
        }
        return LocalTensor<T>::TwMake(reinterpret_cast<T*>(base_), len, addr_, pos);
    }

    void TwAttach(uint8_t* base, uint32_t addr, uint32_t len)
    {
        if (base_ != nullptr) twin::Fail("InitBuffer: the TBuf already has memory");
        base_ = base;
        addr_ = addr;
        len_ = len;
    }

private:
    uint8_t* base_ = nullptr;
    uint32_t addr_ = 0, len_ = 0;
};

class TPipe {
public:
    TPipe() { twin::Core().pipe = this; }
    ~TPipe()
    {
        if (twin::Core().pipe == this) twin::Core().pipe = nullptr;
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    template <TPosition pos, int32_t depth>
    bool InitBuffer(TQue<pos, depth>& que, uint8_t num, uint32_t len)
    {
        uint32_t each = twin::RoundUp(len, 32);
        uint32_t addr = Reserve(pos, num, uint64_t(num) * each);
        que.TwState().Attach(pos, Base(pos, addr), addr, num, each);
        return true;
    }

    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len)
    {
        uint32_t each = twin::RoundUp(len, 32);
        uint32_t addr = Reserve(pos, 1, each);
        buf.TwAttach(Base(pos, addr), addr, each);
        return true;
    }

    void Init() {}
    void Destroy() {}
    void Reset() {}
    TEventID FetchEventID(HardEvent) { return 0; }
    template <HardEvent event>
    TEventID AllocEventID() { return 0; }
    template <HardEvent event>
    void ReleaseEventID(TEventID) {}

private:
    static uint8_t* Base(TPosition pos, uint32_t addr) { return twin::Core().Of(twin::MemOf(pos)).At(addr); }

    static uint32_t Reserve(TPosition pos, int32_t num, uint64_t bytes)
    {
        twin::CoreState& core = twin::Core();
        if (num < 1) twin::Fail("InitBuffer: buffer count must be at least 1, got ", num);
        if (core.pipeBuffers + num > twin::kMaxBuffersPerPipe) {
            twin::Fail("InitBuffer: more than ", twin::kMaxBuffersPerPipe, " buffers in the TPipe (",
                       core.pipeBuffers, " + ", num, ")");
        }
        twin::Mem mem = twin::MemOf(pos);
        twin::Arena& arena = core.Of(mem);
        if (bytes > UINT32_MAX) twin::Fail("InitBuffer: ", bytes, " B do not fit any core memory");
        uint32_t addr = arena.Alloc(uint32_t(bytes), "InitBuffer", mem);
        core.pipeBuffers += num;
        // Fresh buffers hold garbage on hardware; NaN bytes make reads of unwritten data visible.
        if (core.checked) std::memset(arena.At(addr), 0xFF, bytes);
        return addr;
    }
};

inline TPipe* GetTPipePtr() { return static_cast<TPipe*>(twin::Core().pipe); }

}  // namespace AscendC
