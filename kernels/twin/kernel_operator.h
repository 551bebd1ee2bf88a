// CPU twin of the Ascend C kernel API (the subset tilewise kernels use), for clang++/g++ on x86.
// Kernels `#include "kernel_operator.h"` and compile unmodified; each host thread runs one AI core.
// The twin implements the API only: nothing in it knows about a particular kernel.
#pragma once

#include "twin/core.h"
#include "twin/tensor.h"
#include "twin/pipe.h"
#include "twin/copy.h"
#include "twin/vec.h"
#include "twin/cmpsel.h"
#include "twin/activation.h"
