// The machine's record of the CPUs that Chorus's self-bound ranks hold (core/placement.cc), so
// that two jobs on one machine, neither placed by a launcher (two torchrun jobs, two programs
// started by hand), do not both bind their ranks to CPUs 0, 1, ...: the second job's ranks take
// their shares of the CPUs the first left free, or, where fewer are free than it has ranks on
// the node, stay unbound (the scheduler then spreads them).
//
// A small file (default /dev/shm/chorus-cpus-<uid>, CHORUS_BIND_CLAIMS) holds, per CPU, the
// process that holds it (pid and start time, so a dead or reused pid frees it) and the job (its
// communicator's nonce). The first rank of a job on the node to take the file's lock claims
// every local rank's share at once, by their pids; the others find theirs there. Read and
// written once per process, at the first communicator's init; never on a collective's path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

struct ClaimedShare {
  std::vector<int> cpus;  // this rank's share; empty: do not bind
  std::string note;       // why it differs from the plain share (empty where it does not)
};

// This rank's share of `cpus` (sorted ascending; its node's common CPU set), as cpuShare over
// the CPUs of `cpus` no live process of another job holds in the record at `path`.
// `pids` are the node's ranks' processes in local order, `index` this rank's place among them,
// `job` the same on all of them and different from other jobs'. Where the record cannot be used
// (no path, file or lock within a bound time, a pid whose start time cannot be read), the plain
// share of `cpus`, with a note saying why.
ClaimedShare claimShare(const std::string& path, uint64_t job, const std::vector<int>& cpus,
                        const std::vector<int32_t>& pids, int index);

// The default record's path: /dev/shm/chorus-cpus-<uid>.
std::string defaultClaimsPath();

// A process's start time in clock ticks since boot (/proc/<pid>/stat), 0 where it is not there.
uint64_t processStartTime(int32_t pid);

}  // namespace chorus
