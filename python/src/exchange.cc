// Grouped calls and the all-to-all family's transfer (exchange.h).
#include "exchange.h"

#include <cstring>
#include <functional>

#include "errors.h"

namespace chorus_torch {

void grouped(chorusComm_t comm, const char* op, size_t n,
             const std::function<chorusResult_t(size_t)>& call) {
  check(chorusGroupStart(), comm, op);
  chorusResult_t first = chorusSuccess;
  for (size_t i = 0; i < n; ++i) {
    const chorusResult_t r = call(i);
    if (first == chorusSuccess) first = r;
  }
  const chorusResult_t end = chorusGroupEnd();
  check(first != chorusSuccess ? first : end, comm, op);
}

void exchange(chorusComm_t comm, int me, const std::vector<Block>& blocks, const char* op) {
  grouped(comm, op, blocks.size(), [&](size_t p) {
    const Block& b = blocks[p];
    if (int(p) == me) {
      if (b.sendBytes) memcpy(b.recv, b.send, b.sendBytes);
      return chorusSuccess;
    }
    chorusResult_t r = chorusSuccess;
    if (b.sendBytes) r = chorusSend(b.send, b.sendBytes, chorusInt8, int(p), comm, nullptr);
    if (r == chorusSuccess && b.recvBytes)
      r = chorusRecv(b.recv, b.recvBytes, chorusInt8, int(p), comm, nullptr);
    return r;
  });
}

}  // namespace chorus_torch
