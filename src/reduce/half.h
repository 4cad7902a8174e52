// The float16 / bfloat16 conversions live in base/half.h (one copy for the library, the benchmark
// tools and the tests); this header forwards to it for the reduction kernels' existing includes.
#pragma once

#include "base/half.h"
