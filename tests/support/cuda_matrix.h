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

}  // namespace ctest
