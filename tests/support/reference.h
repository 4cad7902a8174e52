// The reference: what every collective must produce, computed with plain loops over all ranks'
// generated inputs (values.h), on one rank, without communication.
//
// Input conventions, shared with the matrix driver (matrix.cc):
//  * AllReduce, Reduce, AllGather, Gather: rank r sends value(r, i), i < count;
//  * Broadcast: the root's buffer holds value(root, i), i < count;
//  * ReduceScatter, AlltoAll: rank r sends value(r, j), j < nranks*count;
//  * Scatter: the root sends value(root, j), j < nranks*count;
//  * Send/Recv: message m from rank s to rank p holds value(s, p2pIndex(p, m) + i).
// Collectives that do not reduce use op kNoOp for their inputs.
//
// Semantics of the reductions (NCCL's): integer sum and prod wrap modulo 2^bits; integer avg is
// the wrapped sum divided by nranks, truncated toward zero; float avg is float(sum) / nranks
// computed in float32 (float64 for double) and rounded once to float16/bfloat16.
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ctest {

// A vector whose elements are left uninitialised on resize (every reference writes them all).
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <class U>
  NoInitAllocator(const NoInitAllocator<U>&) {}
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<unsigned char, NoInitAllocator<unsigned char>>;

struct RefSpec {
  chorusDataType_t type;
  chorusRedOp_t op;  // kNoOp for data movement
  uint64_t seed;
  int nranks;
  size_t count;  // the count argument of the collective
  int root;
};

uint64_t p2pIndex(int peer, int message);

// Reduction over all ranks of elements firstIndex .. firstIndex+count-1 of their inputs.
// shared: several threads of this process are likely to ask for the same one (AllReduce):
// compute it once and hand out copies.
Bytes refReduceElements(const RefSpec& s, uint64_t firstIndex, size_t count, bool shared = false);

Bytes refAllReduce(const RefSpec& s);                // count elements, every rank
Bytes refBroadcast(const RefSpec& s);                // count elements, every rank
Bytes refReduce(const RefSpec& s);                   // count elements, root only
Bytes refAllGather(const RefSpec& s);                // nranks*count elements, every rank
Bytes refReduceScatter(const RefSpec& s, int rank);  // count elements
Bytes refAlltoAll(const RefSpec& s, int rank);       // nranks*count elements
Bytes refGather(const RefSpec& s);                   // nranks*count elements, root only
Bytes refScatter(const RefSpec& s, int rank);        // count elements
// What `receiver` gets in message `message` from `sender` (count elements).
Bytes refRecv(const RefSpec& s, int sender, int receiver, int message);

}  // namespace ctest
