#include "values.h"

#include <atomic>

#include "typed.h"

namespace ctest {

namespace {
std::atomic<int64_t> gSumRangeDivisor{1};
}  // namespace

void setValueRanks(int nranks) {
  gSumRangeDivisor.store(nranks > 8 ? (int64_t(nranks) + 7) / 8 : 1);
}

namespace detail {
int64_t sumRangeDivisor() {
  return gSumRangeDivisor.load(std::memory_order_relaxed);
}
}  // namespace detail

uint64_t mix(uint64_t seed, uint64_t rank, uint64_t index) {
  auto round = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = round(seed + 0x9e3779b97f4a7c15ull);
  h = round(h ^ (rank * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
  return round(h ^ (index + 0x9e3779b97f4a7c15ull));
}

void value(chorusDataType_t type, chorusRedOp_t op, uint64_t seed, int rank, uint64_t index,
           void* dst) {
  fillValues(type, op, seed, rank, index, 1, dst);
}

void fillValues(chorusDataType_t type, chorusRedOp_t op, uint64_t seed, int rank,
                uint64_t firstIndex, size_t count, void* dst) {
  detail::withType(type, [&]<class T>() {
    T* out = static_cast<T*>(dst);
    const uint64_t base = detail::streamBase(type, op, seed, rank);
    for (size_t i = 0; i < count; ++i) out[i] = detail::genAt<T>(op, base, firstIndex + i);
  });
}

}  // namespace ctest
