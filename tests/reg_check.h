// Registered-buffer checks (chorusCommRegister, the zero-copy collectives), shared by the
// threaded tests (test_register.cc) and the process worker (reg_worker.cc): every rank runs the
// same sequence of AllReduce / ReduceScatter calls and compares each result with a reference it
// computes itself from every rank's input (small integers, so sums, products, max and min are
// exact in every type; avg is compared with a tolerance).
#pragma once

#include <chorus/chorus.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace regcheck {

// How this rank's buffers are obtained: chorusMemAlloc and registered, malloc and registered,
// or malloc and not registered.
enum class Buffers { kMemAlloc, kPlainRegistered, kUnregistered };

inline double inputValue(int rank, size_t i) {
  return double((rank * 7 + i * 3) % 5 + 1);
}

template <typename T>
std::string runTyped(chorusComm_t comm, int rank, int n, chorusDataType_t type, chorusRedOp_t op,
                     bool reduceScatter, bool inPlace, size_t count, char* send, char* recv) {
  const size_t inCount = reduceScatter ? count * size_t(n) : count;
  T* in = reinterpret_cast<T*>(send);
  T* out = inPlace ? (reduceScatter ? in + size_t(rank) * count : in) : reinterpret_cast<T*>(recv);
  for (size_t i = 0; i < inCount; ++i) in[i] = T(inputValue(rank, i));
  if (!inPlace)
    for (size_t i = 0; i < count; ++i) out[i] = T(-1);
  const chorusResult_t rc = reduceScatter
                                ? chorusReduceScatter(in, out, count, type, op, comm, nullptr)
                                : chorusAllReduce(in, out, count, type, op, comm, nullptr);
  if (rc != chorusSuccess)
    return std::string(reduceScatter ? "ReduceScatter" : "AllReduce") +
           " failed: " + chorusGetLastError(comm);
  const size_t first = reduceScatter ? size_t(rank) * count : 0;
  for (size_t i = 0; i < count; ++i) {
    double ref = inputValue(0, first + i);
    for (int r = 1; r < n; ++r) {
      const double v = inputValue(r, first + i);
      if (op == chorusSum || op == chorusAvg) ref += v;
      if (op == chorusProd) ref *= v;
      if (op == chorusMax) ref = v > ref ? v : ref;
      if (op == chorusMin) ref = v < ref ? v : ref;
    }
    double want = ref;
    if (op == chorusAvg)
      want = std::is_floating_point<T>::value ? ref / n : double(int64_t(ref) / n);
    const double got = double(out[i]);
    const bool ok =
        op == chorusAvg ? std::fabs(got - want) <= 1e-3 * std::fabs(want) + 1e-6 : got == want;
    if (!ok)
      return std::string(reduceScatter ? "ReduceScatter" : "AllReduce") + " type " +
             std::to_string(int(type)) + " op " + std::to_string(int(op)) + " count " +
             std::to_string(count) + (inPlace ? " in place" : " out of place") + ": element " +
             std::to_string(i) + " is " + std::to_string(got) + ", expected " +
             std::to_string(want) + " (rank " + std::to_string(rank) + ")";
  }
  return "";
}

// AllGather of `count` elements per rank, in place (sendbuff = recvbuff + rank * count) or not.
template <typename T>
std::string runAllGather(chorusComm_t comm, int rank, int n, chorusDataType_t type, bool inPlace,
                         size_t count, char* send, char* recv) {
  T* out = reinterpret_cast<T*>(recv);
  T* in = inPlace ? out + size_t(rank) * count : reinterpret_cast<T*>(send);
  for (size_t i = 0; i < count * size_t(n); ++i) out[i] = T(-1);
  for (size_t i = 0; i < count; ++i) in[i] = T(inputValue(rank, i));
  if (chorusAllGather(in, out, count, type, comm, nullptr) != chorusSuccess)
    return std::string("AllGather failed: ") + chorusGetLastError(comm);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (double(out[size_t(r) * count + i]) != inputValue(r, i))
        return "AllGather type " + std::to_string(int(type)) + " count " + std::to_string(count) +
               (inPlace ? " in place" : " out of place") + ": block " + std::to_string(r) +
               " element " + std::to_string(i) + " wrong (rank " + std::to_string(rank) + ")";
  return "";
}

// One buffer pair as `how` says; registered on every rank together (collective), even a rank
// whose buffers stay unregistered registers a scratch page so that the ranks' registrations
// match.
struct RankBuffers {
  char* send = nullptr;
  char* recv = nullptr;
  bool memAlloc = false;
  void* handles[2] = {nullptr, nullptr};
  std::string error;
  RankBuffers(chorusComm_t comm, Buffers how, size_t bytes) {
    memAlloc = how == Buffers::kMemAlloc;
    if (memAlloc) {
      void* a = nullptr;
      void* b = nullptr;
      if (chorusMemAlloc(&a, bytes) != chorusSuccess ||
          chorusMemAlloc(&b, bytes) != chorusSuccess) {
        error = "chorusMemAlloc failed";
        return;
      }
      send = static_cast<char*>(a);
      recv = static_cast<char*>(b);
    } else {
      send = static_cast<char*>(aligned_alloc(4096, bytes));
      recv = static_cast<char*>(aligned_alloc(4096, bytes));
    }
    // An unregistered rank registers a page of its own instead (every rank calls register).
    static char spare[2][4096];
    const bool reg = how != Buffers::kUnregistered;
    if (chorusCommRegister(comm, reg ? send : spare[0], reg ? bytes : 4096, &handles[0]) !=
            chorusSuccess ||
        chorusCommRegister(comm, reg ? recv : spare[1], reg ? bytes : 4096, &handles[1]) !=
            chorusSuccess)
      error = std::string("chorusCommRegister failed: ") + chorusGetLastError(comm);
  }
  std::string deregister(chorusComm_t comm) {
    for (void*& h : handles) {
      if (h == nullptr) continue;
      if (chorusCommDeregister(comm, h) != chorusSuccess)
        return std::string("chorusCommDeregister failed: ") + chorusGetLastError(comm);
      h = nullptr;
    }
    return "";
  }
  void release() {
    if (memAlloc) {
      chorusMemFree(send);
      chorusMemFree(recv);
    } else {
      free(send);
      free(recv);
    }
  }
};

// The whole sequence on one communicator. `how` may differ between ranks (mixed). Returns the
// first error, "" when every result matched.
inline std::string runAll(chorusComm_t comm, int rank, int n, Buffers how) {
  const size_t counts[] = {0, 1, 7, 63, 1001, 4099, 65537, 300001};
  const size_t maxBytes = 300001 * size_t(n) * 8;
  RankBuffers b(comm, how, maxBytes);
  if (!b.error.empty()) return b.error;
  std::string err;
  struct TypeCase {
    chorusDataType_t type;
    chorusRedOp_t ops[5];
    int nops;
  };
  const TypeCase types[] = {
      {chorusFloat32, {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg}, 5},
      {chorusFloat64, {chorusSum, chorusAvg}, 2},
      {chorusInt32, {chorusSum, chorusMax, chorusMin}, 3},
      {chorusInt64, {chorusProd}, 1},
  };
  for (int pass = 0; pass < 2 && err.empty(); ++pass) {  // pass 1: after deregistration
    if (pass == 1) {
      err = b.deregister(comm);
      if (!err.empty()) break;
    }
    for (const TypeCase& tc : types)
      for (int oi = 0; oi < tc.nops && err.empty(); ++oi)
        for (size_t count : counts)
          for (int rs = 0; rs < 2 && err.empty(); ++rs)
            for (int ip = 0; ip < 2 && err.empty(); ++ip) {
              if (pass == 1 && count > 4099) continue;  // the fallback: a few sizes suffice
              const chorusRedOp_t op = tc.ops[oi];
              if (oi == 0 && rs == 0) {  // AllGather once per type and size
                err = tc.type == chorusFloat64 || tc.type == chorusInt64
                          ? runAllGather<int64_t>(comm, rank, n, chorusInt64, ip, count, b.send,
                                                  b.recv)
                          : runAllGather<int32_t>(comm, rank, n, chorusInt32, ip, count, b.send,
                                                  b.recv);
                if (!err.empty()) break;
              }
              switch (tc.type) {
                case chorusFloat32:
                  err = runTyped<float>(comm, rank, n, tc.type, op, rs, ip, count, b.send, b.recv);
                  break;
                case chorusFloat64:
                  err = runTyped<double>(comm, rank, n, tc.type, op, rs, ip, count, b.send, b.recv);
                  break;
                case chorusInt32:
                  err =
                      runTyped<int32_t>(comm, rank, n, tc.type, op, rs, ip, count, b.send, b.recv);
                  break;
                default:
                  err =
                      runTyped<int64_t>(comm, rank, n, tc.type, op, rs, ip, count, b.send, b.recv);
                  break;
              }
            }
  }
  b.release();
  return err;
}

}  // namespace regcheck
