#include "comm/register.h"

#include <sys/mman.h>

#include "comm/comm.h"

namespace chorus {

int regFind(RegState& st, int rank, const void* addr, size_t bytes) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  for (int s = 0; s < st.nslots; ++s) {
    if (!st.slotLive[size_t(s)]) continue;
    const RegRegion& r = st.at(s, rank);
    if (a >= r.base && a - r.base <= r.bytes && bytes <= r.bytes - (a - r.base)) return s;
  }
  return -1;
}

void freeRegState(chorusComm* comm) {
  RegState* st = comm->reg;
  if (st == nullptr) return;
  for (RegRegion& r : st->regions)
    if (r.map != nullptr) munmap(r.map, r.mapBytes);
  delete st;
  comm->reg = nullptr;
}

}  // namespace chorus
