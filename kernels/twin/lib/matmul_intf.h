// Ascend C kernels include "lib/matmul_intf.h" for the Matmul high-level API.
#pragma once

#include "../kernel_operator.h"
#include "../twin/matmul.h"
