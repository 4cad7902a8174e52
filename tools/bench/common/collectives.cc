// The collectives of the nccl-tests-style benchmarks, one CollDesc each: the busbw factor, the
// buffer layout, the call and the expected output. The programs (all_reduce_perf, ...) are one
// main (tools/bench/bench_main.cc) built once per entry: adding a collective is one entry here
// and its name in CMakeLists.txt's CHORUS_BENCH_PROGRAMS.
#include "collectives.h"

#include <cstring>

namespace chorus_bench {

namespace {

// all_reduce_perf: every rank ends with the reduction of all ranks' buffers.
constexpr CollDesc kAllReduce = {
    .name = "all_reduce_perf",
    .hasOp = true,
    .hasRoot = false,
    .countPerRank = false,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return 2.0 * (n - 1) / n; },
    .layout =
        [](size_t count, int, int) {
          return Layout{count, count, 0, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusAllReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm, a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          reduceInputs(e.spec, 0, e.count, out);
          return e.count;
        },
};

// all_gather_perf: every rank ends with all ranks' `count` elements, in rank order.
// In place: sendbuff == recvbuff + rank * count.
constexpr CollDesc kAllGather = {
    .name = "all_gather_perf",
    .hasOp = false,
    .hasRoot = false,
    .countPerRank = true,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout =
        [](size_t count, int n, int rank) {
          return Layout{count, count * n, count * rank, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusAllGather(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          for (int r = 0; r < e.nranks; ++r) {
            fillInput(e.spec, r, 0, e.count, elementAt(out, r * e.count, e.spec.type));
          }
          return e.count * e.nranks;
        },
};

// reduce_scatter_perf: rank r ends with block r (of `count` elements) of the reduction of all
// ranks' buffers. In place: recvbuff == sendbuff + rank * count.
constexpr CollDesc kReduceScatter = {
    .name = "reduce_scatter_perf",
    .hasOp = true,
    .hasRoot = false,
    .countPerRank = true,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout =
        [](size_t count, int n, int rank) {
          return Layout{count * n, count, 0, count * rank};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusReduceScatter(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm,
                                     a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          reduceInputs(e.spec, e.rank * e.count, e.count, out);
          return e.count;
        },
};

// broadcast_perf: every rank ends with the root's buffer.
constexpr CollDesc kBroadcast = {
    .name = "broadcast_perf",
    .hasOp = false,
    .hasRoot = true,
    .countPerRank = false,
    .checkInPlace = true,
    .busBwFactor = [](int) { return 1.0; },
    .layout =
        [](size_t count, int, int) {
          return Layout{count, count, 0, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusBroadcast(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          fillInput(e.spec, e.root, 0, e.count, out);
          return e.count;
        },
};

// reduce_perf: the root ends with the reduction of all ranks' buffers (other ranks' receive
// buffers are not defined).
constexpr CollDesc kReduce = {
    .name = "reduce_perf",
    .hasOp = true,
    .hasRoot = true,
    .countPerRank = false,
    .checkInPlace = true,
    .busBwFactor = [](int) { return 1.0; },
    .layout =
        [](size_t count, int, int) {
          return Layout{count, count, 0, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.root, a.comm,
                              a.stream);
        },
    .expected = [](const ExpectArgs& e, void* out) -> size_t {
      if (e.rank != e.root) return 0;
      reduceInputs(e.spec, 0, e.count, out);
      return e.count;
    },
};

// alltoall_perf: block p (of `count` elements) of rank r's receive buffer is block r of rank
// p's send buffer. In place: sendbuff == recvbuff (Chorus stages the input).
constexpr CollDesc kAlltoAll = {
    .name = "alltoall_perf",
    .hasOp = false,
    .hasRoot = false,
    .countPerRank = true,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout =
        [](size_t count, int n, int) {
          return Layout{count * n, count * n, 0, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusAlltoAll(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          for (int p = 0; p < e.nranks; ++p) {
            fillInput(e.spec, p, e.rank * e.count, e.count,
                      elementAt(out, p * e.count, e.spec.type));
          }
          return e.count * e.nranks;
        },
};

// gather_perf: the root ends with all ranks' `count` elements, in rank order. In place:
// sendbuff == recvbuff + rank * count.
constexpr CollDesc kGather = {
    .name = "gather_perf",
    .hasOp = false,
    .hasRoot = true,
    .countPerRank = true,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout =
        [](size_t count, int n, int rank) {
          return Layout{count, count * n, count * rank, 0};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusGather(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
        },
    .expected = [](const ExpectArgs& e, void* out) -> size_t {
      if (e.rank != e.root) return 0;
      for (int r = 0; r < e.nranks; ++r) {
        fillInput(e.spec, r, 0, e.count, elementAt(out, r * e.count, e.spec.type));
      }
      return e.count * e.nranks;
    },
};

// scatter_perf: rank r ends with block r (of `count` elements) of the root's send buffer. In
// place: recvbuff == sendbuff + rank * count.
constexpr CollDesc kScatter = {
    .name = "scatter_perf",
    .hasOp = false,
    .hasRoot = true,
    .countPerRank = true,
    .checkInPlace = true,
    .busBwFactor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout =
        [](size_t count, int n, int rank) {
          return Layout{count * n, count, 0, count * rank};
        },
    .launch =
        [](const CallArgs& a) {
          return chorusScatter(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
        },
    .expected =
        [](const ExpectArgs& e, void* out) {
          fillInput(e.spec, e.root, e.rank * e.count, e.count, out);
          return e.count;
        },
};

// sendrecv_perf: every rank sends its buffer to rank+1 and receives rank-1's (a ring of
// point-to-point transfers in one group). In place (one buffer for both) is not defined: it is
// timed, not checked.
chorusResult_t sendRecv(const CallArgs& a) {
  const int next = (a.rank + 1) % a.nranks;
  const int prev = (a.rank + a.nranks - 1) % a.nranks;
  chorusResult_t r = chorusGroupStart();
  if (r != chorusSuccess) return r;
  const chorusResult_t s = chorusSend(a.sendbuff, a.count, a.type, next, a.comm, a.stream);
  const chorusResult_t v = chorusRecv(a.recvbuff, a.count, a.type, prev, a.comm, a.stream);
  r = chorusGroupEnd();
  return s != chorusSuccess ? s : v != chorusSuccess ? v : r;
}

constexpr CollDesc kSendRecv = {
    .name = "sendrecv_perf",
    .hasOp = false,
    .hasRoot = false,
    .countPerRank = false,
    .checkInPlace = false,
    .busBwFactor = [](int) { return 1.0; },
    .layout =
        [](size_t count, int, int) {
          return Layout{count, count, 0, 0};
        },
    .launch = sendRecv,
    .expected =
        [](const ExpectArgs& e, void* out) {
          fillInput(e.spec, (e.rank + e.nranks - 1) % e.nranks, 0, e.count, out);
          return e.count;
        },
};

constexpr const CollDesc* kAll[] = {&kAllReduce, &kAllGather, &kReduceScatter,
                                    &kBroadcast, &kReduce,    &kAlltoAll,
                                    &kGather,    &kScatter,   &kSendRecv};

}  // namespace

const CollDesc* findCollective(const char* program) {
  for (const CollDesc* d : kAll)
    if (std::strcmp(d->name, program) == 0) return d;
  return nullptr;
}

}  // namespace chorus_bench
