// The benchmark driver shared by every X_perf tool. A tool describes its collective in a
// CollDesc (bandwidth factor, buffer layout, how to call it, what each rank must receive) and
// calls benchMain; the harness does the rest: flags, ranks (processes x threads), the sweep,
// timing, checking, the nccl-tests table and the JSON document.
#ifndef CHORUS_BENCH_HARNESS_H_
#define CHORUS_BENCH_HARNESS_H_

#include <chorus/chorus.h>

#include <cstddef>
#include <string>

#include "check.h"
#include "report.h"
#include "types.h"

namespace chorus_bench {

// Element counts of one rank's buffers for a given count argument. In place, both buffers live
// in one allocation of max(sendCount, recvCount) elements, at the two offsets (NCCL's
// conventions: AllGather sends from recvbuff + rank*count, ReduceScatter receives at
// sendbuff + rank*count, the others use one pointer).
struct Layout {
  size_t sendCount = 0;
  size_t recvCount = 0;
  size_t sendInPlaceOffset = 0;
  size_t recvInPlaceOffset = 0;
};

// Everything one call of the collective needs.
struct CallArgs {
  const void* sendbuff;
  void* recvbuff;
  size_t count;  // the per-rank count argument
  chorusDataType_t type;
  chorusRedOp_t op;  // meaningless without a reduction
  int root;          // meaningless without a root
  int rank;
  int nranks;
  chorusComm_t comm;
  chorusStream_t stream;
};

// What a rank must find in its receive buffer after one call.
struct ExpectArgs {
  DataSpec spec;  // the generator every rank filled its send buffer with (fillInput at index 0)
  size_t count;   // the per-rank count argument
  int rank;
  int nranks;
  int root;
};

struct CollDesc {
  const char* name;  // "all_reduce_perf": the tool, as the footer names it
  bool hasOp;        // takes a reduction op (-o); otherwise redop prints "none"
  bool hasRoot;      // takes a root (-r); otherwise root prints -1
  // The count argument is the total element count divided by nranks (AllGather, ReduceScatter,
  // AlltoAll, Gather, Scatter); sizes are then rounded down to multiples of typesize * nranks.
  bool countPerRank;
  // Whether in-place has a defined result to check (not for SendRecv, where one buffer both
  // sent and received has no defined result): otherwise in-place is timed and #wrong is N/A.
  bool checkInPlace;
  double (*busBwFactor)(int nranks);
  Layout (*layout)(size_t count, int nranks, int rank);
  chorusResult_t (*launch)(const CallArgs& a);
  // Writes what this rank's receive buffer must hold (up to recvCount elements) to `expected`
  // and returns how many elements to compare; 0 where the output is undefined (a non-root of a
  // rooted collective).
  size_t (*expected)(const ExpectArgs& e, void* expected);
};

// The address of element `index` of a buffer of `type` elements.
inline void* elementAt(void* base, size_t index, chorusDataType_t type) {
  return static_cast<char*>(base) + index * typeSize(type);
}

// Runs the tool: returns the process exit status (0: success, every value right).
int benchMain(int argc, char** argv, const CollDesc& desc);

// The tuner's name for the tool's collective: "all_reduce_perf" -> "allreduce",
// "reduce_scatter_perf" -> "reducescatter", "sendrecv_perf" -> "sendrecv".
std::string tunerCollective(const char* toolName);

// What the library runs for one call of the tool's collective with this count (the per-rank
// count argument) and type on this communicator: chorusTunerChoice's algorithm, protocol,
// channels and predicted time, honouring CHORUS_ALGO / CHORUS_PROTO. SendRecv is a batch of
// point-to-point transfers: "direct", "simple", 1 channel. "unknown" if the library refuses.
Choice describeChoice(const CollDesc& desc, chorusComm_t comm, size_t count, chorusDataType_t type);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_HARNESS_H_
