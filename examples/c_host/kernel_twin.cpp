// The kernel for the CPU twin: the unmodified Ascend C source compiled against kernels/twin and
// exported through the twin's C ABI (tw_run), as tilewise's cpu-twin backend builds a variant.
#include "ops/linear_add_gelu/linear_add_gelu.cpp"
#include "twin_launch.h"

#include "linear_add_gelu_tiling.h"

TWIN_EXPORT_KERNEL(linear_add_gelu, LinearAddGeluTiling, 5)  // x, w, bias, out, workspace

// The host's struct must lay out every field where the kernel reads it.
static_assert(sizeof(LinearAddGeluTiling) == sizeof(lag_host::LinearAddGeluTilingData), "tiling struct size");
#define LAG_CHECK_CUBE_FIELD(name)                                                                      \
    static_assert(offsetof(LinearAddGeluTiling, cube.name) ==                                           \
                      offsetof(lag_host::LinearAddGeluTilingData, cube) + offsetof(lag_host::CubeTilingData, name), \
                  "cube." #name " is not where the kernel reads it");
LAG_CUBE_FIELDS(LAG_CHECK_CUBE_FIELD)
static_assert(offsetof(LinearAddGeluTiling, epiRows) == offsetof(lag_host::LinearAddGeluTilingData, epiRows),
              "epiRows is not where the kernel reads it");
