// reduce_perf: the root ends with the reduction of all ranks' buffers (other ranks' receive
// buffers are not defined).
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kReduce);
}
