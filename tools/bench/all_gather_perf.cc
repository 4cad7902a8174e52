// all_gather_perf: every rank ends with all ranks' `count` elements, in rank order.
// In place: sendbuff == recvbuff + rank * count.
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kAllGather);
}
