#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/half.h"
#include "types.h"

namespace chorus_bench {

namespace {

struct Half16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// How the harness handles one element type: the exact accumulator (double for floats, 64-bit
// integers otherwise), conversions, and the largest integer up to which every partial sum is
// exact.
template <typename T>
struct Traits {
  static_assert(std::is_integral_v<T>);
  using Acc = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = std::is_signed_v<T>;
  static constexpr uint64_t kMaxExact = static_cast<uint64_t>(std::numeric_limits<T>::max());
  static constexpr int64_t kCap = sizeof(T) == 1 ? 127 : 1000;
  static Acc toAcc(T v) { return static_cast<Acc>(v); }
  static T fromAcc(Acc v) { return static_cast<T>(v); }
  static Acc random(uint64_t h) { return toAcc(static_cast<T>(h)); }
};

// Non-zero multiples of 1/256 in (-3907, 3907): no NaN, no infinity, no signed zero.
inline double randomFloat(uint64_t h) {
  const int64_t k = static_cast<int64_t>(h % 2000001u) - 1000000;
  return k == 0 ? 1.0 : static_cast<double>(k) / 256.0;
}

template <typename T, typename Bits, int kDigits, int64_t kCapV>
struct FloatTraits {
  using Acc = double;
  using BitsT = Bits;
  static constexpr bool kFloat = true;
  static constexpr bool kSigned = true;
  static constexpr uint64_t kMaxExact = uint64_t{1} << kDigits;
  static constexpr int64_t kCap = kCapV;
};

template <>
struct Traits<float> : FloatTraits<float, uint32_t, 24, 1000> {
  static Acc toAcc(float v) { return v; }
  static float fromAcc(Acc v) { return static_cast<float>(v); }
  static Acc random(uint64_t h) { return toAcc(fromAcc(randomFloat(h))); }
};
template <>
struct Traits<double> : FloatTraits<double, uint64_t, 53, 1000> {
  static Acc toAcc(double v) { return v; }
  static double fromAcc(Acc v) { return v; }
  static Acc random(uint64_t h) { return randomFloat(h); }
};
template <>
struct Traits<Half16> : FloatTraits<Half16, uint16_t, 11, 16> {
  static Acc toAcc(Half16 v) { return chorus::halfToFloat(v.bits); }
  static Half16 fromAcc(Acc v) { return Half16{chorus::floatToHalf(static_cast<float>(v))}; }
  static Acc random(uint64_t h) { return toAcc(fromAcc(randomFloat(h))); }
};
template <>
struct Traits<BFloat16> : FloatTraits<BFloat16, uint16_t, 8, 16> {
  static Acc toAcc(BFloat16 v) { return chorus::bf16ToFloat(v.bits); }
  static BFloat16 fromAcc(Acc v) { return BFloat16{chorus::floatToBf16(static_cast<float>(v))}; }
  static Acc random(uint64_t h) { return toAcc(fromAcc(randomFloat(h))); }
};

inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t hash(uint64_t seed, int rank, size_t index) {
  return mix64(seed ^ mix64((static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index)));
}

// The generator for one (type, op, nranks, seed).
template <typename T>
class Generator {
 public:
  using Tr = Traits<T>;
  using Acc = typename Tr::Acc;

  explicit Generator(const DataSpec& s) : spec_(s) {
    const uint64_t n = static_cast<uint64_t>(std::max(1, s.nranks));
    // At most `k` ranks contribute to any element of a sum, each at most `bound_` in magnitude.
    const uint64_t k = std::min<uint64_t>(n, Tr::kMaxExact);
    stride_ = (n + k - 1) / k;
    bound_ = std::max<int64_t>(
        1, std::min<int64_t>(Tr::kCap, static_cast<int64_t>(std::min<uint64_t>(
                                           Tr::kMaxExact / k, uint64_t{1} << 40))));
  }

  Acc value(int rank, size_t i) const {
    const uint64_t h = hash(spec_.seed, rank, i);
    const size_t n = static_cast<size_t>(spec_.nranks);
    switch (spec_.op) {
      case chorusSum:
      case chorusAvg: {
        if (stride_ > 1 && (static_cast<uint64_t>(rank) + i) % stride_ != 0) return Acc(0);
        if (spec_.op == chorusSum && Tr::kSigned) {
          const int64_t v =
              static_cast<int64_t>(h % static_cast<uint64_t>(2 * bound_ + 1)) - bound_;
          return static_cast<Acc>(v);
        }
        return static_cast<Acc>(h % static_cast<uint64_t>(bound_ + 1));
      }
      case chorusProd: {
        const size_t r = static_cast<size_t>(rank);
        int64_t v = (r == i % n || r == (i / n) % n) ? 2 : 1;
        if (Tr::kSigned && ((h >> 17) & 1u)) v = -v;
        return static_cast<Acc>(v);
      }
      default:  // max, min, and data movement
        return Tr::random(h);
    }
  }

  Acc reduce(size_t i) const {
    Acc acc = value(0, i);
    for (int r = 1; r < spec_.nranks; ++r) {
      const Acc v = value(r, i);
      switch (spec_.op) {
        case chorusSum:
        case chorusAvg:
          acc = acc + v;
          break;
        case chorusProd:
          acc = acc * v;
          break;
        case chorusMax:
          acc = std::max(acc, v);
          break;
        case chorusMin:
          acc = std::min(acc, v);
          break;
        default:
          break;
      }
    }
    if (spec_.op == chorusAvg) {
      if constexpr (Tr::kFloat) {
        acc = acc / static_cast<double>(spec_.nranks);
      } else {
        acc = acc / static_cast<Acc>(spec_.nranks);  // integer division: truncation toward 0
      }
    }
    return acc;
  }

 private:
  DataSpec spec_;
  uint64_t stride_ = 1;
  int64_t bound_ = 1;
};

template <typename T>
void fillT(const DataSpec& spec, int rank, size_t first, size_t n, void* dst) {
  Generator<T> g(spec);
  T* out = static_cast<T*>(dst);
  for (size_t j = 0; j < n; ++j) out[j] = Traits<T>::fromAcc(g.value(rank, first + j));
}

template <typename T>
void reduceT(const DataSpec& spec, size_t first, size_t n, void* dst) {
  Generator<T> g(spec);
  T* out = static_cast<T*>(dst);
  for (size_t j = 0; j < n; ++j) out[j] = Traits<T>::fromAcc(g.reduce(first + j));
}

// Maps the bits of a float onto a line where adjacent values are adjacent integers.
template <typename Bits>
int64_t orderedKey(Bits u) {
  constexpr Bits kSign = Bits{1} << (sizeof(Bits) * 8 - 1);
  const int64_t mag = static_cast<int64_t>(u & static_cast<Bits>(~kSign));
  return (u & kSign) ? -mag : mag;
}

template <typename T>
uint64_t ulpT(const void* a, const void* b) {
  using Bits = typename Traits<T>::BitsT;
  Bits ua, ub;
  std::memcpy(&ua, a, sizeof ua);
  std::memcpy(&ub, b, sizeof ub);
  const double da = Traits<T>::toAcc(*static_cast<const T*>(a));
  const double db = Traits<T>::toAcc(*static_cast<const T*>(b));
  if (std::isnan(da) || std::isnan(db)) return std::numeric_limits<uint64_t>::max();
  const int64_t ka = orderedKey(ua), kb = orderedKey(ub);
  return static_cast<uint64_t>(ka > kb ? ka - kb : kb - ka);
}

template <typename T>
size_t countWrongT(const DataSpec& spec, const void* got, const void* expected, size_t n) {
  const unsigned char* g = static_cast<const unsigned char*>(got);
  const unsigned char* e = static_cast<const unsigned char*>(expected);
  size_t wrong = 0;
  if constexpr (Traits<T>::kFloat) {
    if (spec.op == chorusAvg) {
      for (size_t j = 0; j < n; ++j) {
        if (ulpT<T>(g + j * sizeof(T), e + j * sizeof(T)) > 2) ++wrong;
      }
      return wrong;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (std::memcmp(g + j * sizeof(T), e + j * sizeof(T), sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

// Calls f.template operator()<T>() with the storage type of `type`.
template <typename F>
auto dispatch(chorusDataType_t type, F&& f) {
  switch (type) {
    case chorusInt8:
      return f.template operator()<int8_t>();
    case chorusUint8:
      return f.template operator()<uint8_t>();
    case chorusInt32:
      return f.template operator()<int32_t>();
    case chorusUint32:
      return f.template operator()<uint32_t>();
    case chorusInt64:
      return f.template operator()<int64_t>();
    case chorusUint64:
      return f.template operator()<uint64_t>();
    case chorusFloat16:
      return f.template operator()<Half16>();
    case chorusFloat64:
      return f.template operator()<double>();
    case chorusBfloat16:
      return f.template operator()<BFloat16>();
    case chorusFloat32:
    default:
      return f.template operator()<float>();
  }
}

}  // namespace

void fillInput(const DataSpec& spec, int rank, size_t first, size_t n, void* dst) {
  dispatch(spec.type, [&]<typename T>() { fillT<T>(spec, rank, first, n, dst); });
}

void reduceInputs(const DataSpec& spec, size_t first, size_t n, void* dst) {
  dispatch(spec.type, [&]<typename T>() { reduceT<T>(spec, first, n, dst); });
}

size_t countWrong(const DataSpec& spec, const void* got, const void* expected, size_t n) {
  return dispatch(spec.type, [&]<typename T>() { return countWrongT<T>(spec, got, expected, n); });
}

uint64_t ulpDistance(chorusDataType_t type, const void* a, const void* b) {
  return dispatch(type, [&]<typename T>() -> uint64_t {
    if constexpr (Traits<T>::kFloat) {
      return ulpT<T>(a, b);
    } else {
      T x, y;
      std::memcpy(&x, a, sizeof x);
      std::memcpy(&y, b, sizeof y);
      return x > y ? static_cast<uint64_t>(x - y) : static_cast<uint64_t>(y - x);
    }
  });
}

}  // namespace chorus_bench
