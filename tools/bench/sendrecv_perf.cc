// sendrecv_perf: every rank sends its buffer to rank+1 and receives rank-1's (a ring of
// point-to-point transfers in one group). In place (one buffer for both) is not defined: it is
// timed, not checked.
#include "harness.h"

namespace {

using namespace chorus_bench;

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

}  // namespace

int main(int argc, char** argv) {
  return benchMain(argc, argv, kSendRecv);
}
