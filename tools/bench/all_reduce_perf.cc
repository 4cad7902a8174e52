// all_reduce_perf: every rank ends with the reduction of all ranks' buffers.
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kAllReduce);
}
