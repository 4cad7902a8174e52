// The table of the benchmarks' collectives (common/collectives.cc).
#pragma once

#include "harness.h"

namespace chorus_bench {

// The entry whose name is `program` (e.g. "all_reduce_perf"), or nullptr.
const CollDesc* findCollective(const char* program);

}  // namespace chorus_bench
