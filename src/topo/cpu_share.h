// How the ranks of a node that were given the same CPU set (nothing placed them: torchrun,
// mpirun --bind-to none, srun without --cpu-bind, ranks started by hand, threads of one process)
// share it: rank i of n takes the i-th of n contiguous blocks of the set, the first
// (size mod n) blocks one CPU larger. Contiguous blocks keep each share on distinct cores where
// the kernel numbers SMT siblings apart (0..N-1, then their siblings), as it usually does.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus {

// The CPUs of share `index` of `n` over `cpus` (sorted ascending); empty when n < 1, index is out
// of range or there are fewer CPUs than shares.
std::vector<int> cpuShare(const std::vector<int>& cpus, int index, int n);

// A 64-bit digest of a CPU list, so that ranks can compare their sets through the exchange.
uint64_t cpuSetDigest(const std::vector<int>& cpus);

}  // namespace chorus
