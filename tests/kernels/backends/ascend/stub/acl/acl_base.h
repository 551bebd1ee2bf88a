// Test stub of the ACL declarations the tilewise host runner uses (CANN acl/acl_base.h,
// acl/acl_rt.h): same names and signatures, nothing else. Not CANN's header.
#ifndef TILEWISE_STUB_ACL_BASE_H
#define TILEWISE_STUB_ACL_BASE_H

#include <cstddef>
#include <cstdint>

typedef int aclError;
typedef void* aclrtStream;
typedef void* aclrtEvent;

static const int ACL_SUCCESS = 0;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY,
    ACL_MEM_MALLOC_NORMAL_ONLY,
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

#endif
