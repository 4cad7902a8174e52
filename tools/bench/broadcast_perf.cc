// broadcast_perf: every rank ends with the root's buffer.
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kBroadcast);
}
