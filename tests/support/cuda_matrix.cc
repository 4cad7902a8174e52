#include "cuda_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "reduce/half.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/backend.h"
#endif

namespace ctest {

#ifndef CHORUS_HAVE_CUDA

bool cudaDeviceUsable(std::string* why) {
  *why = "built without CUDA";
  return false;
}

std::vector<std::string> runCudaMatrix(chorusComm_t, int, int, bool) {
  return {"built without CUDA"};
}

std::vector<std::string> runCudaIpcAllReduce(chorusComm_t, int, int) {
  return {"built without CUDA"};
}

#else

bool cudaDeviceUsable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

namespace {

enum class C {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  SendRecv
};
const char* kNames[] = {"AllReduce", "Broadcast", "Reduce",  "AllGather", "ReduceScatter",
                        "AlltoAll",  "Gather",    "Scatter", "SendRecv"};

// Input element j of rank r: small non-negative integers; {1, 2} for prod (exact powers of 2).
double input(int r, size_t j, chorusRedOp_t op) {
  if (op == chorusProd) return double(1 + (r + j) % 2);
  return double((size_t(r) * 7 + j * 3) % 13);
}

void store(chorusDataType_t t, double v, void* p) {
  switch (t) {
    case chorusInt8: {
      int8_t x = int8_t(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusUint8: {
      uint8_t x = uint8_t(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case chorusInt32: {
      int32_t x = int32_t(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusUint32: {
      uint32_t x = uint32_t(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusInt64: {
      int64_t x = int64_t(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case chorusUint64: {
      uint64_t x = uint64_t(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case chorusFloat16: {
      uint16_t x = chorus::floatToHalf(float(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusBfloat16: {
      uint16_t x = chorus::floatToBf16(float(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case chorusFloat32: {
      float x = float(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case chorusFloat64:
      std::memcpy(p, &v, 8);
      break;
    default:
      break;
  }
}

bool isInt(chorusDataType_t t) {
  return t == chorusInt8 || t == chorusUint8 || t == chorusInt32 || t == chorusUint32 ||
         t == chorusInt64 || t == chorusUint64;
}

// The reduction of element j over all ranks, stored as type t (avg: the exact sum divided once).
void reduced(chorusDataType_t t, chorusRedOp_t op, int n, size_t j, void* out) {
  double acc = input(0, j, op);
  for (int r = 1; r < n; ++r) {
    const double v = input(r, j, op);
    acc = op == chorusProd  ? acc * v
          : op == chorusMax ? std::max(acc, v)
          : op == chorusMin ? std::min(acc, v)
                            : acc + v;
  }
  if (op == chorusAvg) {
    if (isInt(t)) {
      acc = double(int64_t(acc) / n);
    } else if (t == chorusFloat64) {
      acc = acc / n;
    } else {
      acc = double(float(acc) / float(n));  // computed in float32, rounded once by store()
    }
  }
  store(t, acc, out);
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { cudaMalloc(&p, std::max<size_t>(bytes, 1)); }
  ~Dev() { cudaFree(p); }
  unsigned char* b() const { return static_cast<unsigned char*>(p); }
};

}  // namespace

std::vector<std::string> runCudaMatrix(chorusComm_t comm, int rank, int n, bool useStream) {
  std::vector<std::string> fails;
  int dev = -1;
  chorusCommCuDevice(comm, &dev);
  if (dev < 0) return {"not a device communicator"};
  cudaSetDevice(dev);
  cudaStream_t cs = nullptr;
  chorusStream_t stream = nullptr;
  if (useStream) {
    cudaStreamCreate(&cs);
    if (chorusStreamCreateFromCuda(&stream, cs) != chorusSuccess)
      return {"chorusStreamCreateFromCuda failed"};
  }
  const chorusDataType_t types[] = {chorusInt8,    chorusUint8,  chorusInt32,   chorusUint32,
                                    chorusInt64,   chorusUint64, chorusFloat16, chorusBfloat16,
                                    chorusFloat32, chorusFloat64};
  const chorusRedOp_t ops[] = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};
  const size_t counts[] = {0, 1, 1000, 1048579};
  const int root = n - 1;
  for (int ci = 0; ci <= int(C::SendRecv); ++ci) {
    const C c = C(ci);
    const bool reduces = c == C::AllReduce || c == C::Reduce || c == C::ReduceScatter;
    for (chorusDataType_t t : types) {
      const size_t esz = chorusTypeSize(t);
      for (chorusRedOp_t op : ops) {
        if (!reduces && op != chorusSum) continue;
        for (size_t count : counts) {
          if (count > 1000 && t != chorusFloat32 && t != chorusBfloat16 && op != chorusSum)
            continue;
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            if ((c == C::SendRecv || c == C::AlltoAll) && inPlace) continue;
            const size_t all = count * size_t(n);
            const size_t sendElems =
                c == C::ReduceScatter || c == C::AlltoAll || c == C::Scatter ? all : count;
            const size_t recvElems =
                c == C::AllGather || c == C::AlltoAll || c == C::Gather ? all : count;
            const size_t cap = std::max(sendElems, recvElems) * esz;
            Dev dsend(cap), drecv(cap + 64);
            std::vector<unsigned char> h(cap + 64, 0xcd), want(cap, 0), got(cap + 64);
            // Send contents: element j of this rank (for Scatter / AlltoAll / ReduceScatter the
            // whole nranks*count array).
            std::vector<unsigned char> sendHost(sendElems * esz);
            for (size_t j = 0; j < sendElems; ++j) store(t, input(rank, j, op), &sendHost[j * esz]);
            unsigned char* sendPtr = dsend.b();
            unsigned char* recvPtr = drecv.b();
            cudaMemcpy(drecv.b(), h.data(), cap + 64, cudaMemcpyHostToDevice);
            if (inPlace) {
              size_t off = 0;  // where sendbuff lies inside recvbuff
              if (c == C::AllGather || c == C::Gather) off = size_t(rank) * count * esz;
              if (c == C::ReduceScatter || c == C::Scatter) {
                recvPtr = drecv.b() + size_t(rank) * count * esz;
                sendPtr = drecv.b();
              } else {
                sendPtr = drecv.b() + off;
              }
              if ((c == C::Gather && rank != root)) sendPtr = drecv.b();
            }
            cudaMemcpy(sendPtr, sendHost.data(), sendHost.size(), cudaMemcpyHostToDevice);
            chorusResult_t r = chorusSuccess;
            switch (c) {
              case C::AllReduce:
                r = chorusAllReduce(sendPtr, recvPtr, count, t, op, comm, stream);
                break;
              case C::Broadcast:
                r = chorusBroadcast(sendPtr, recvPtr, count, t, root, comm, stream);
                break;
              case C::Reduce:
                r = chorusReduce(sendPtr, recvPtr, count, t, op, root, comm, stream);
                break;
              case C::AllGather:
                r = chorusAllGather(sendPtr, recvPtr, count, t, comm, stream);
                break;
              case C::ReduceScatter:
                r = chorusReduceScatter(sendPtr, recvPtr, count, t, op, comm, stream);
                break;
              case C::AlltoAll:
                r = chorusAlltoAll(sendPtr, recvPtr, count, t, comm, stream);
                break;
              case C::Gather:
                r = chorusGather(sendPtr, recvPtr, count, t, root, comm, stream);
                break;
              case C::Scatter:
                r = chorusScatter(sendPtr, recvPtr, count, t, root, comm, stream);
                break;
              case C::SendRecv:
                chorusGroupStart();
                chorusSend(sendPtr, count, t, (rank + 1) % n, comm, stream);
                chorusRecv(recvPtr, count, t, (rank + n - 1) % n, comm, stream);
                r = chorusGroupEnd();
                break;
            }
            if (r == chorusSuccess && stream) r = chorusStreamSynchronize(stream);
            char what[160];
            std::snprintf(what, sizeof what, "[rank %d] %s type %d op %d count %zu %s", rank,
                          kNames[ci], int(t), int(op), count,
                          inPlace ? "in-place" : "out-of-place");
            if (r != chorusSuccess) {
              fails.push_back(std::string(what) + ": " + chorusGetErrorString(r) + " " +
                              chorusGetLastError(comm));
              continue;
            }
            if (useStream) cudaStreamSynchronize(cs);
            cudaMemcpy(got.data(), recvPtr, recvElems * esz, cudaMemcpyDeviceToHost);
            // Expected contents of the receive buffer.
            size_t check = recvElems;
            for (size_t j = 0; j < recvElems; ++j) {
              unsigned char* w = &want[j * esz];
              switch (c) {
                case C::AllReduce:
                  reduced(t, op, n, j, w);
                  break;
                case C::Reduce:
                  if (rank != root)
                    check = 0;
                  else
                    reduced(t, op, n, j, w);
                  break;
                case C::ReduceScatter:
                  reduced(t, op, n, size_t(rank) * count + j, w);
                  break;
                case C::Broadcast:
                  store(t, input(root, j, op), w);
                  break;
                case C::AllGather:
                  store(t, input(int(j / count), j % count, op), w);
                  break;
                case C::Gather:
                  if (rank != root)
                    check = 0;
                  else
                    store(t, input(int(j / count), j % count, op), w);
                  break;
                case C::AlltoAll:
                  store(t, input(int(j / count), size_t(rank) * count + j % count, op), w);
                  break;
                case C::Scatter:
                  store(t, input(root, size_t(rank) * count + j, op), w);
                  break;
                case C::SendRecv:
                  store(t, input((rank + n - 1) % n, j, op), w);
                  break;
              }
            }
            if (std::memcmp(got.data(), want.data(), check * esz) != 0) {
              fails.push_back(std::string(what) + ": wrong values");
            } else if (!inPlace) {
              std::vector<unsigned char> guard(64);
              cudaMemcpy(guard.data(), drecv.b() + recvElems * esz, 64, cudaMemcpyDeviceToHost);
              for (unsigned char g : guard)
                if (g != 0xcd) {
                  fails.push_back(std::string(what) + ": wrote past the receive buffer");
                  break;
                }
            }
            if (fails.size() > 20) return fails;
          }
        }
      }
    }
  }
  if (stream) chorusStreamDestroy(stream);
  if (cs) cudaStreamDestroy(cs);
  return fails;
}

std::vector<std::string> runCudaIpcAllReduce(chorusComm_t comm, int rank, int n) {
  std::vector<std::string> fails;
  int dev = -1;
  chorusCommCuDevice(comm, &dev);
  if (dev < 0) return {"not a device communicator"};
  cudaSetDevice(dev);
  const size_t maxBytes = 1048579 * 8 + 64;
  auto pool = std::make_unique<Dev>(2 * maxBytes + 256);
  size_t calls = 0;
  // One AllReduce on buffers inside `pool`; checks values and the guard after recvbuff.
  auto one = [&](chorusDataType_t t, chorusRedOp_t op, size_t count, bool inPlace, size_t shift) {
    const size_t esz = chorusTypeSize(t);
    unsigned char* send = pool->b() + shift;
    unsigned char* recv = inPlace ? send : pool->b() + maxBytes + 128 + shift;
    std::vector<unsigned char> host(count * esz), want(count * esz), got(count * esz + 64);
    std::vector<unsigned char> guard(count * esz + 64, 0xcd);
    if (!inPlace) cudaMemcpy(recv, guard.data(), guard.size(), cudaMemcpyHostToDevice);
    for (size_t j = 0; j < count; ++j) store(t, input(rank, j, op), &host[j * esz]);
    cudaMemcpy(send, host.data(), host.size(), cudaMemcpyHostToDevice);
    char what[160];
    std::snprintf(what, sizeof what, "[rank %d] IPC AllReduce type %d op %d count %zu %s shift %zu",
                  rank, int(t), int(op), count, inPlace ? "in-place" : "out-of-place", shift);
    ++calls;
    const chorusResult_t r = chorusAllReduce(send, recv, count, t, op, comm, nullptr);
    if (r != chorusSuccess) {
      fails.push_back(std::string(what) + ": " + chorusGetErrorString(r) + " " +
                      chorusGetLastError(comm));
      return;
    }
    for (size_t j = 0; j < count; ++j) reduced(t, op, n, j, &want[j * esz]);
    cudaMemcpy(got.data(), recv, inPlace ? count * esz : got.size(), cudaMemcpyDeviceToHost);
    if (std::memcmp(got.data(), want.data(), want.size()) != 0) {
      size_t j = 0;
      while (std::memcmp(&got[j * esz], &want[j * esz], esz) == 0) ++j;
      fails.push_back(std::string(what) + ": wrong values from element " + std::to_string(j));
    } else if (!inPlace) {
      for (size_t g = count * esz; g < got.size(); ++g)
        if (got[g] != 0xcd) {
          fails.push_back(std::string(what) + ": wrote past the receive buffer");
          break;
        }
    }
  };
  const chorusDataType_t types[] = {chorusFloat32, chorusBfloat16, chorusFloat16,
                                    chorusInt32,   chorusInt8,     chorusFloat64};
  const chorusRedOp_t ops[] = {chorusSum, chorusAvg, chorusMax, chorusMin, chorusProd};
  for (chorusDataType_t t : types)
    for (chorusRedOp_t op : ops)
      for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{1048579}}) {
        if (count > 1000 &&
            ((t != chorusFloat32 && t != chorusBfloat16) || (op != chorusSum && op != chorusAvg)))
          continue;
        for (int inPlace = 0; inPlace < 2; ++inPlace)
          for (size_t shift : {size_t{0}, chorusTypeSize(t)}) {
            one(t, op, count, inPlace != 0, shift);
            if (fails.size() > 20) return fails;
          }
      }
  // Ranks differ: even ranks in place, odd ranks out of place.
  one(chorusFloat32, chorusSum, 1000, rank % 2 == 0, 0);
  const chorus::CudaIpcStats s1 = chorus::cudaIpcStats(comm);
  auto stat = [&](const char* name, uint64_t v, uint64_t want) {
    if (v != want)
      fails.push_back("[rank " + std::to_string(rank) + "] " + name + " = " + std::to_string(v) +
                      ", expected " + std::to_string(want));
  };
  stat("directCalls", s1.directCalls, calls);
  stat("fallbacks", s1.fallbacks, 0);
  stat("failed cudaIpcCloseMemHandle calls", s1.closeFailures, 0);
  // CHORUS_CUDA_IPC_CACHE=0 (the device check's run without the cache): every call maps and
  // unmaps again; the counts below are the cache's.
  const char* cacheEnv = std::getenv("CHORUS_CUDA_IPC_CACHE");
  if (cacheEnv != nullptr && std::atoi(cacheEnv) == 0) {
    if (s1.misses < calls)
      fails.push_back("[rank " + std::to_string(rank) +
                      "] CHORUS_CUDA_IPC_CACHE=0: misses = " + std::to_string(s1.misses) +
                      ", expected at least one per call (" + std::to_string(calls) + ")");
    pool.reset();
    return fails;
  }
  stat("misses (one allocation per rank, mapped once)", s1.misses, uint64_t(n));
  stat("evictions", s1.evictions, 0);
  // A new allocation: mapped again (the old one may or may not come back at the same address).
  pool.reset();
  pool = std::make_unique<Dev>(2 * maxBytes + 256);
  one(chorusFloat32, chorusSum, 1000, false, 0);
  const chorus::CudaIpcStats s2 = chorus::cudaIpcStats(comm);
  stat("directCalls after reallocation", s2.directCalls, calls);
  stat("misses after reallocation", s2.misses - s1.misses, uint64_t(n));
  if (s2.exchanges > 2)
    fails.push_back("[rank " + std::to_string(rank) + "] " + std::to_string(s2.exchanges) +
                    " record exchanges, at most 2 expected");
  return fails;
}

#endif

}  // namespace ctest
