// LocalTensor (a view into one core memory) and GlobalTensor (a view into GM).
#pragma once

#include "core.h"

namespace AscendC {

template <typename T>
class LocalTensor {
public:
    using PrimType = T;

    LocalTensor() = default;

    // Twin-internal constructor: `addr` is the byte offset within the core memory of `pos`.
    static LocalTensor TwMake(T* data, uint32_t size, uint32_t addr, TPosition pos)
    {
        LocalTensor t;
        t.data_ = data;
        t.size_ = size;
        t.addr_ = addr;
        t.pos_ = pos;
        return t;
    }

    LocalTensor operator[](uint32_t offset) const
    {
        if (offset > size_) twin::Fail("LocalTensor[", offset, "]: offset beyond the size ", size_);
        return TwMake(data_ + offset, size_ - offset, addr_ + offset * uint32_t(sizeof(T)), pos_);
    }

    template <typename U>
    LocalTensor<U> ReinterpretCast() const
    {
        return LocalTensor<U>::TwMake(reinterpret_cast<U*>(data_),
                                      uint32_t(uint64_t(size_) * sizeof(T) / sizeof(U)), addr_, pos_);
    }

    T GetValue(uint32_t index) const { return data_[CheckIndex("GetValue", index)]; }
    void SetValue(uint32_t index, T value) const { data_[CheckIndex("SetValue", index)] = value; }
    T& operator()(uint32_t index) const { return data_[CheckIndex("operator()", index)]; }

    uint32_t GetSize() const { return size_; }
    uint32_t GetLength() const { return size_ * uint32_t(sizeof(T)); }
    void SetSize(uint32_t size)
    {
        if (size > size_) twin::Fail("LocalTensor::SetSize(", size, "): larger than ", size_);
        size_ = size;
    }
    uint64_t GetPhyAddr() const { return addr_; }
    TPosition GetPosition() const { return pos_; }

    T* TwData() const { return data_; }

private:
    uint32_t CheckIndex(const char* what, uint32_t index) const
    {
        if (index >= size_) twin::Fail("LocalTensor::", what, "(", index, "): size is ", size_);
        return index;
    }

    T* data_ = nullptr;
    uint32_t size_ = 0;
    uint32_t addr_ = 0;
    TPosition pos_ = TPosition::VECCALC;
};

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;

    // `size` in elements; 0 (or the one-argument form) leaves the size unknown and unchecked.
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t size)
    {
        data_ = buffer;
        size_ = size;
        sized_ = size != 0;
    }
    void SetGlobalBuffer(__gm__ T* buffer) { SetGlobalBuffer(buffer, 0); }

    GlobalTensor operator[](uint64_t offset) const
    {
        GlobalTensor t = *this;
        if (sized_) {
            if (offset > size_ && twin::Checked()) {
                twin::Fail("GlobalTensor[", offset, "]: offset beyond the size ", size_);
            }
            t.size_ = offset > size_ ? 0 : size_ - offset;
        }
        t.data_ = data_ + offset;
        return t;
    }

    T GetValue(uint64_t index) const { return data_[CheckIndex("GetValue", index)]; }
    void SetValue(uint64_t index, T value) const { data_[CheckIndex("SetValue", index)] = value; }
    T& operator()(uint64_t index) const { return data_[CheckIndex("operator()", index)]; }

    uint64_t GetSize() const { return size_; }
    __gm__ T* GetPhyAddr() const { return data_; }
    __gm__ T* GetPhyAddr(uint64_t offset) const { return data_ + offset; }

    T* TwData() const { return data_; }
    bool TwSized() const { return sized_; }

    // Checked mode: error when [0, count) is beyond a known size.
    void TwCheckRange(const char* what, uint64_t count) const
    {
        if (data_ == nullptr) twin::Fail(what, ": GlobalTensor has no buffer (SetGlobalBuffer)");
        if (sized_ && count > size_ && twin::Checked()) {
            twin::Fail(what, ": ", count, " elements exceed the GlobalTensor size ", size_);
        }
    }

private:
    uint64_t CheckIndex(const char* what, uint64_t index) const
    {
        if (sized_ && index >= size_ && twin::Checked()) {
            twin::Fail("GlobalTensor::", what, "(", index, "): size is ", size_);
        }
        return index;
    }

    T* data_ = nullptr;
    uint64_t size_ = 0;
    bool sized_ = false;
};

}  // namespace AscendC

namespace twin {

// Once per API call: `count` elements starting at `t` lie inside its buffer (and, in checked
// mode, the start is 32-byte aligned as the vector and MTE units require).
template <typename T>
inline void CheckLocal(const char* what, const AscendC::LocalTensor<T>& t, uint64_t count)
{
    if (t.TwData() == nullptr) Fail(what, ": LocalTensor is not allocated");
    if (count > t.GetSize()) {
        Fail(what, ": ", count, " elements exceed the LocalTensor size ", t.GetSize());
    }
    if (t.GetPhyAddr() % 32 != 0 && Checked()) {  // the mode (thread-local) only when it matters
        Fail(what, ": local address ", t.GetPhyAddr(), " is not 32-byte aligned");
    }
}

// For an API whose documentation forbids a destination overlapping a source (SwiGLU): the
// twin's element loops would compute it anyway, where the device's passes overwrite the source.
template <typename T, typename S>
inline void CheckDisjoint(const char* what, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<S>& src,
                          uint64_t count)
{
    const auto* d = reinterpret_cast<const unsigned char*>(dst.TwData());
    const auto* s = reinterpret_cast<const unsigned char*>(src.TwData());
    if (d < s + count * sizeof(S) && s < d + count * sizeof(T)) {
        Fail(what, ": the destination overlaps a source, which the API does not support");
    }
}

}  // namespace twin
