// alltoall_perf: block p (of `count` elements) of rank r's receive buffer is block r of rank
// p's send buffer. In place: sendbuff == recvbuff (Chorus stages the input).
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kAlltoAll);
}
