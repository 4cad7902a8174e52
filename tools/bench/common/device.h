// --device: the benchmarks' buffers in CUDA device memory (CUDA builds only). The harness keeps
// host mirrors of every buffer: it fills and checks them on the host and copies them to and
// from the device around the calls it checks.
#ifndef CHORUS_BENCH_DEVICE_H_
#define CHORUS_BENCH_DEVICE_H_

#include <cstddef>
#include <string>

namespace chorus_bench {

// Whether --device can run: a CUDA build with at least one usable device. Otherwise *why says
// what is missing ("Chorus was built without CUDA", "no CUDA device: ...").
bool deviceAvailable(int* ndevices, std::string* why);
// The calls below end the process with a message on failure.
void deviceSelect(int device);
void* deviceAlloc(size_t bytes);
void deviceFree(void* p);
void deviceCopyToDevice(void* dst, const void* src, size_t bytes);
void deviceCopyToHost(void* dst, const void* src, size_t bytes);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_DEVICE_H_
