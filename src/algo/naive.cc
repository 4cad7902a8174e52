// The naive ring AllReduce of the naive-ring study, kept to show what the real one gains: one
// channel, no pipelining, built only from whole-chunk Send/Recv exchanges, with a separate
// reduction pass after each receive and a full synchronisation per step.
#include <cstring>
#include <vector>

#include "algo/algo.h"
#include "comm/comm.h"
#include "reduce/reduce.h"

namespace chorus {

void naiveAllReduce(chorusComm* comm, const OpDesc& op) {
  const int n = comm->nranks, r = comm->rank;
  const size_t esz = chorusTypeSize(op.type), count = op.count;
  char* dst = static_cast<char*>(op.recvbuff);
  if (op.sendbuff != op.recvbuff) memmove(dst, op.sendbuff, count * esz);
  const size_t per = (count + size_t(n) - 1) / size_t(n);
  auto range = [&](int k, size_t* off, size_t* len) {
    *off = std::min(count, size_t(k) * per);
    *len = std::min(count, *off + per) - *off;
  };
  std::vector<char> tmp(per * esz);
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int step = 0; step < n - 1; ++step) {  // reduce-scatter
    size_t so, sl, ro, rl;
    range((r - step + n) % n, &so, &sl);
    range((r - step - 1 + 2 * n) % n, &ro, &rl);
    runP2P(comm, {{true, next, dst + so * esz, sl * esz}, {false, prev, tmp.data(), rl * esz}},
           "AllReduce(naive)");
    reduceKernel(op.type, op.op, rl, tmp.data(), dst + ro * esz, dst + ro * esz, nullptr,
                 op.op == chorusAvg && step == n - 2 ? n : 0);
  }
  for (int step = 0; step < n - 1; ++step) {  // allgather
    size_t so, sl, ro, rl;
    range((r + 1 - step + n) % n, &so, &sl);
    range((r - step + n) % n, &ro, &rl);
    runP2P(comm, {{true, next, dst + so * esz, sl * esz}, {false, prev, dst + ro * esz, rl * esz}},
           "AllReduce(naive)");
  }
}

namespace {
// An unpipelined exchange and a synchronisation per step; a separate reduction pass.
double naiveHops(OpKind, const Shape& s, size_t) {
  return 4.0 * (double(s.nranks) - 1);
}
double naiveBytes(OpKind, int n) {
  const double nn = double(n);
  return 4.0 * (nn - 1) / nn;
}
}  // namespace

// The naive ring exists to be compared against: the tuner picks it only when CHORUS_ALGO names
// it.
extern const AlgoDesc kNaiveAlgo = {
    .name = "naive",
    .serves = kindBit(OpKind::kAllReduce),
    .protos = kSimpleOnly,
    .unnamedBelow = [](const Shape&) { return size_t(0); },
    .hops = naiveHops,
    .byteFactor = naiveBytes,
    .run = entries({{OpKind::kAllReduce,
                     [](chorusComm* c, const OpDesc& op, const Work&) { naiveAllReduce(c, op); }}}),
};

}  // namespace chorus
