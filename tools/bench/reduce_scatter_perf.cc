// reduce_scatter_perf: rank r ends with block r (of `count` elements) of the reduction of all
// ranks' buffers. In place: recvbuff == sendbuff + rank * count.
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kReduceScatter);
}
