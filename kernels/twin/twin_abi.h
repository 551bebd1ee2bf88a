/* C ABI shared by every built kernel variant (.so) and the twin runner.
 * Plain C so that either side can be rebuilt alone; bump TW_ABI_VERSION on any change. */
#ifndef TWIN_ABI_H
#define TWIN_ABI_H

#include <stdint.h>

#define TW_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* Per-core memory sizes in bytes (0 = that memory does not exist) and the checking mode. */
struct TwCoreLimits {
    uint32_t ub, l1, l0a, l0b, l0c, bt;
    uint32_t checked; /* 1: 32-byte rule, alignment and GM bounds are errors; 0: behave like hardware */
};

/* The host's thread pool: runs fn(arg, i) for every i in [0, n), returns when all are done. */
struct TwHost {
    void (*parallel_for)(void* impl, uint32_t n, void (*fn)(void* arg, uint32_t i), void* arg);
    void* impl;
};

/* Exported by each variant .so (see twin_launch.h):
 *   int         tw_abi_version(void);
 *   uint32_t    tw_tiling_bytes(void);
 *   int32_t     tw_gm_args(void);
 *   const char* tw_run(uint8_t* const* gm, int32_t n_gm, const void* tiling, uint32_t tiling_bytes,
 *                      uint32_t block_dim, const struct TwCoreLimits* limits, const struct TwHost* host);
 * tw_run returns NULL on success, else an error message valid until the next tw_run call. */
typedef int (*tw_abi_version_fn)(void);
typedef uint32_t (*tw_tiling_bytes_fn)(void);
typedef int32_t (*tw_gm_args_fn)(void);
typedef const char* (*tw_run_fn)(uint8_t* const* gm, int32_t n_gm, const void* tiling,
                                 uint32_t tiling_bytes, uint32_t block_dim,
                                 const struct TwCoreLimits* limits, const struct TwHost* host);

#ifdef __cplusplus
}
#endif

#endif /* TWIN_ABI_H */
