// The collective matrix on device buffers (GPU runs only): every collective, type, op, a few
// counts, in and out of place, on one device communicator per rank; inputs are small integers,
// so every reduction is exact (or rounded once, for avg) and the reference is computed in double.
#pragma once

#include <chorus/chorus.h>

#include <string>
#include <vector>

namespace ctest {

// Whether a CUDA device is usable here (a CUDA build with a driver and a GPU).
bool cudaDeviceUsable(std::string* why);

// Runs the matrix on `comm` (bound to a device) as `rank` of `nranks`; every rank calls it
// concurrently. Returns the failures (empty: passed).
std::vector<std::string> runCudaMatrix(chorusComm_t comm, int rank, int nranks, bool useStream);

// The direct IPC AllReduce (CHORUS_CUDA_IPC=1 set before `comm` was created): AllReduce only,
// several types and ops, counts 1, 3, 1000, 1048579, in and out of place, 16-byte aligned and
// misaligned buffers, all inside one allocation per rank (so repeated calls must hit the
// registration cache), then one rank in place and the next out of place, then a freed and
// reallocated buffer. Checks the values, the guard bytes and, through the backend's counters,
// that the direct path ran every time and mapped each allocation once. Returns the failures.
std::vector<std::string> runCudaIpcAllReduce(chorusComm_t comm, int rank, int nranks);

}  // namespace ctest
