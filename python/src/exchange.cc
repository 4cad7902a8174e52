// The all-to-all family's transfer (exchange.h).
#include "exchange.h"

#include <cstring>

#include "errors.h"

namespace chorus_torch {

void exchange(chorusComm_t comm, int me, const std::vector<Block>& blocks, const char* op) {
  check(chorusGroupStart(), comm, op);
  chorusResult_t first = chorusSuccess;
  for (int p = 0; p < int(blocks.size()); ++p) {
    const Block& b = blocks[size_t(p)];
    if (p == me) {
      if (b.sendBytes) memcpy(b.recv, b.send, b.sendBytes);
      continue;
    }
    chorusResult_t r = chorusSuccess;
    if (b.sendBytes) r = chorusSend(b.send, b.sendBytes, chorusInt8, p, comm, nullptr);
    if (r == chorusSuccess && b.recvBytes)
      r = chorusRecv(b.recv, b.recvBytes, chorusInt8, p, comm, nullptr);
    if (first == chorusSuccess) first = r;
  }
  const chorusResult_t end = chorusGroupEnd();
  check(first != chorusSuccess ? first : end, comm, op);
}

}  // namespace chorus_torch
