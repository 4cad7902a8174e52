#include "reference.h"

#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <utility>

#include "test_types.h"
#include "typed.h"
#include "values.h"

namespace ctest {

namespace {

template <class T>
T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(uint64_t{static_cast<U>(a)} + uint64_t{static_cast<U>(b)}));
}

template <class T>
T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(uint64_t{static_cast<U>(a)} * uint64_t{static_cast<U>(b)}));
}

template <class T>
void reduceTyped(const RefSpec& s, uint64_t firstIndex, size_t count, T* out) {
  const chorusRedOp_t op = s.op;
  const int n = s.nranks;
  std::vector<uint64_t> bases(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) bases[r] = detail::streamBase(s.type, op, s.seed, r);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t idx = firstIndex + i;
    if constexpr (detail::kIsFloat<T>) {
      using FT = detail::FloatTraits<T>;
      using Acc = typename FT::Acc;
      // Every partial result is exact for the generated inputs, so the order does not matter.
      double acc = detail::floatValue<T>(op, detail::elementHash(bases[0], idx));
      for (int r = 1; r < n; ++r) {
        const double v = detail::floatValue<T>(op, detail::elementHash(bases[r], idx));
        switch (op) {
          case chorusSum:
          case chorusAvg:
            acc += v;
            break;
          case chorusProd:
            acc *= v;
            break;
          case chorusMin:
            acc = v < acc ? v : acc;
            break;
          case chorusMax:
            acc = v > acc ? v : acc;
            break;
          default:
            break;
        }
      }
      if (op == chorusAvg) {
        out[i] = FT::fromAcc(static_cast<Acc>(acc) / static_cast<Acc>(n));
      } else {
        out[i] = FT::fromDouble(acc);
      }
    } else {
      T acc = detail::genAt<T>(op, bases[0], idx);
      for (int r = 1; r < n; ++r) {
        const T v = detail::genAt<T>(op, bases[r], idx);
        switch (op) {
          case chorusSum:
          case chorusAvg:
            acc = wrapAdd(acc, v);
            break;
          case chorusProd:
            acc = wrapMul(acc, v);
            break;
          case chorusMin:
            acc = v < acc ? v : acc;
            break;
          case chorusMax:
            acc = v > acc ? v : acc;
            break;
          default:
            break;
        }
      }
      if (op == chorusAvg) {
        // The wrapped sum divided by nranks; C++ division truncates toward zero.
        if constexpr (std::is_signed_v<T>) {
          acc = static_cast<T>(static_cast<int64_t>(acc) / n);
        } else {
          acc = static_cast<T>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(n));
        }
      }
      out[i] = acc;
    }
  }
}

Bytes alloc(const RefSpec& s, size_t elements) {
  return Bytes(elements * typeSize(s.type));
}

void fillFrom(const RefSpec& s, int rank, uint64_t firstIndex, size_t count, unsigned char* dst) {
  fillValues(s.type, s.op, s.seed, rank, firstIndex, count, dst);
}

}  // namespace

uint64_t p2pIndex(int peer, int message) {
  return (static_cast<uint64_t>(peer) * 16 + static_cast<uint64_t>(message)) << 36;
}

namespace {

Bytes computeReduction(const RefSpec& s, uint64_t firstIndex, size_t count) {
  Bytes out = alloc(s, count);
  detail::withType(s.type, [&]<class T>() {
    reduceTyped<T>(s, firstIndex, count, reinterpret_cast<T*>(out.data()));
  });
  return out;
}

// When the ranks are threads of one process, every rank of an AllReduce asks for the same large
// reduction: the first computes it, the others wait for it and copy it.
struct CacheKey {
  chorusDataType_t type;
  chorusRedOp_t op;
  uint64_t seed;
  int nranks;
  uint64_t firstIndex;
  size_t count;
  bool operator==(const CacheKey&) const = default;
};

std::shared_future<std::shared_ptr<const Bytes>> sharedReduction(const RefSpec& s,
                                                                 uint64_t firstIndex,
                                                                 size_t count) {
  static std::mutex mu;
  static std::deque<std::pair<CacheKey, std::shared_future<std::shared_ptr<const Bytes>>>> cache;
  constexpr size_t kEntries = 8;
  const CacheKey key{s.type, s.op, s.seed, s.nranks, firstIndex, count};
  std::promise<std::shared_ptr<const Bytes>> promise;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, f] : cache) {
      if (k == key) return f;
    }
    cache.emplace_back(key, promise.get_future().share());
    if (cache.size() > kEntries) cache.pop_front();
  }
  auto result = std::make_shared<const Bytes>(computeReduction(s, firstIndex, count));
  promise.set_value(result);
  std::promise<std::shared_ptr<const Bytes>> done;
  done.set_value(result);
  return done.get_future().share();
}

}  // namespace

Bytes refReduceElements(const RefSpec& s, uint64_t firstIndex, size_t count, bool shared) {
  if (!shared || count < 4096) return computeReduction(s, firstIndex, count);
  return *sharedReduction(s, firstIndex, count).get();
}

Bytes refAllReduce(const RefSpec& s) {
  return refReduceElements(s, 0, s.count);
}

Bytes refReduce(const RefSpec& s) {
  return refReduceElements(s, 0, s.count);
}

Bytes refBroadcast(const RefSpec& s) {
  Bytes out = alloc(s, s.count);
  fillFrom(s, s.root, 0, s.count, out.data());
  return out;
}

Bytes refAllGather(const RefSpec& s) {
  Bytes out = alloc(s, s.count * s.nranks);
  const size_t block = s.count * typeSize(s.type);
  for (int r = 0; r < s.nranks; ++r) fillFrom(s, r, 0, s.count, out.data() + r * block);
  return out;
}

Bytes refGather(const RefSpec& s) {
  return refAllGather(s);
}

Bytes refReduceScatter(const RefSpec& s, int rank) {
  return refReduceElements(s, static_cast<uint64_t>(rank) * s.count, s.count);
}

Bytes refAlltoAll(const RefSpec& s, int rank) {
  // Block j of rank i's input goes to block i of rank j.
  Bytes out = alloc(s, s.count * s.nranks);
  const size_t block = s.count * typeSize(s.type);
  for (int i = 0; i < s.nranks; ++i) {
    fillFrom(s, i, static_cast<uint64_t>(rank) * s.count, s.count, out.data() + i * block);
  }
  return out;
}

Bytes refScatter(const RefSpec& s, int rank) {
  Bytes out = alloc(s, s.count);
  fillFrom(s, s.root, static_cast<uint64_t>(rank) * s.count, s.count, out.data());
  return out;
}

Bytes refRecv(const RefSpec& s, int sender, int receiver, int message) {
  Bytes out = alloc(s, s.count);
  fillFrom(s, sender, p2pIndex(receiver, message), s.count, out.data());
  return out;
}

}  // namespace ctest
