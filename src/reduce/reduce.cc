// Reduction and scale kernels (the copy kernels are reduce/copy_kernel.cc).
//
// Every (format, op, one-or-two-destinations) combination is its own template instantiation
// with a plain elementwise loop the compiler auto-vectorises (this file is built with -O3).
// Each loop is instantiated three times: once for the target's baseline instruction set and, on
// x86-64, inside functions compiled with target("avx2,f16c") and with
// target("avx512f,avx512bw,avx512vl,avx512dq,..."), so the same source yields 256- and 512-bit
// code. The build is chosen once per process from the CPU's features (and CHORUS_SIMD).
//
// Why target attributes in this one file rather than separate files built with -mavx512f or
// target_clones: the wide code stays confined to the functions marked, so no inline function
// or template (ours or the standard library's) compiled for AVX-512 can be merged by the linker
// into the baseline path and fault on an older CPU (the ODR hazard of per-file ISA flags); and
// unlike target_clones' ifunc each build stays callable by name, so the tests run every build
// on one machine against the same reference. No per-call cpuid: bestKernelIsa() decides once.
//
// float16/bfloat16 are computed in float32 and rounded once to nearest even. The AVX2 build
// converts 16 values at a time with F16C (float16) or integer shifts/adds (bfloat16); the
// portable build uses the element formats of reduce/arith.h (shared with the CUDA kernels), whose
// host conversions are branch-free forms of base/half.h that the compiler can vectorise. Every
// path gives results bit-identical to base/half.h (all 2^32 float inputs were
// checked during development; the tests run every 16-bit pattern through each build).
//
// Aliasing: a destination may be the same pointer as an input. Each iteration reads a[i], b[i]
// before writing index i only, so the loops carry no dependence; GCC ivdep tells the vectoriser
// so (its runtime overlap check would otherwise send the in-place case, dst0 == a, which is the
// common one, to the scalar fallback).
#include "reduce/reduce.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "reduce/arith.h"
#include "reduce/type_dispatch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define CHORUS_REDUCE_X86 1
#define CHORUS_TARGET_AVX2 __attribute__((target("avx2,f16c")))
// No "fma": the compiler must not contract a * b + c differently from the other builds.
#define CHORUS_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))
#endif

#include <cstdio>
#include <cstdlib>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable),
// which -Wmaybe-uninitialized reports once inlined here: a false positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <string_view>

#if defined(__clang__)
#define CHORUS_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define CHORUS_IVDEP _Pragma("GCC ivdep")
#else
#define CHORUS_IVDEP
#endif

#define CHORUS_INLINE __attribute__((always_inline)) inline

namespace chorus {
namespace {

// The element formats (PlainElem, HalfElem, Bf16Elem), the ops (RedOp) and RedKind are those of
// reduce/arith.h, shared with the CUDA kernels. HalfElem's host conversions are the branch-free
// forms of base/half.h, so the portable build's loops vectorise.

// ---- The loops. ----

template <class F, RedKind K, bool Dual>
CHORUS_INLINE void reduceLoop(size_t n, const void* pa, const void* pb, void* pd0, void* pd1,
                              int divisor) {
  using S = typename F::Storage;
  using C = typename F::Compute;
  const S* a = static_cast<const S*>(pa);
  const S* b = static_cast<const S*>(pb);
  S* d0 = static_cast<S*>(pd0);
  const RedOp<C, K> op{static_cast<DivisorOf<C>>(divisor)};
  if constexpr (Dual) {
    S* d1 = static_cast<S*>(pd1);
    CHORUS_IVDEP
    for (size_t i = 0; i < n; ++i) {
      const S v = F::store(op(F::load(a[i]), F::load(b[i])));
      d0[i] = v;
      d1[i] = v;
    }
  } else {
    CHORUS_IVDEP
    for (size_t i = 0; i < n; ++i) d0[i] = F::store(op(F::load(a[i]), F::load(b[i])));
  }
}

template <class F>
CHORUS_INLINE void scaleLoop(size_t n, const void* psrc, void* pdst, int divisor) {
  using S = typename F::Storage;
  using C = typename F::Compute;
  const S* src = static_cast<const S*>(psrc);
  S* dst = static_cast<S*>(pdst);
  const DivisorOf<C> d = static_cast<DivisorOf<C>>(divisor);
  CHORUS_IVDEP
  for (size_t i = 0; i < n; ++i) dst[i] = F::store(divideBy(F::load(src[i]), d));
}

#ifdef CHORUS_REDUCE_X86
// 16-bit floats in the AVX2 build: explicit conversions to/from float32 around the float op, 16
// values per step (GCC's own vectorisation of the scalar conversions is several times slower).
// The tail goes through a zero-padded block, so every element is computed by the same
// instructions.
template <RedKind K>
CHORUS_TARGET_AVX2 CHORUS_INLINE __m256 vecOp(__m256 a, __m256 b, __m256 divisor) {
  if constexpr (K == RedKind::kSum) {
    return _mm256_add_ps(a, b);
  } else if constexpr (K == RedKind::kProd) {
    return _mm256_mul_ps(a, b);
  } else if constexpr (K == RedKind::kMax) {
    return _mm256_max_ps(b, a);  // b > a ? b : a, i.e. a < b ? b : a
  } else if constexpr (K == RedKind::kMin) {
    return _mm256_min_ps(b, a);  // b < a ? b : a
  } else {
    return _mm256_div_ps(_mm256_add_ps(a, b), divisor);
  }
}

// A block is 16 values: one 256-bit load or store, two __m256 of floats (lo, hi). Only
// pack(load(x)) order matters, not which float lane holds which value.

// float16 via F16C, rounding to nearest even (as floatToHalf).
struct HalfVec {
  static CHORUS_TARGET_AVX2 CHORUS_INLINE void load(const uint16_t* p, __m256* lo, __m256* hi) {
    *lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
  static CHORUS_TARGET_AVX2 CHORUS_INLINE __m256i pack(__m256 lo, __m256 hi) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm256_setr_m128i(_mm256_cvtps_ph(lo, kRound), _mm256_cvtps_ph(hi, kRound));
  }
};

// bfloat16 with integer ops. Interleaving zero below each 16-bit value gives its float32 bits
// (in-lane order, which the in-lane pack undoes); narrowing is exactly floatToBf16 per lane.
struct Bf16Vec {
  static CHORUS_TARGET_AVX2 CHORUS_INLINE void load(const uint16_t* p, __m256* lo, __m256* hi) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i zero = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x));
  }
  static CHORUS_TARGET_AVX2 CHORUS_INLINE __m256i narrow(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i top = _mm256_srli_epi32(x, 16);
    // Round to nearest even: add 0x7fff plus the lowest kept bit, then drop the low half.
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(top, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    // NaN: truncate and set the quiet bit instead.
    const __m256 isNan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), isNan));
  }
  static CHORUS_TARGET_AVX2 CHORUS_INLINE __m256i pack(__m256 lo, __m256 hi) {
    // Every lane is <= 0xffff, so the saturating in-lane pack just narrows.
    return _mm256_packus_epi32(narrow(lo), narrow(hi));
  }
};

template <class V, RedKind K, bool Dual>
CHORUS_TARGET_AVX2 CHORUS_INLINE void reduce16Avx2(size_t n, const void* pa, const void* pb,
                                                   void* pd0, void* pd1, int divisor) {
  const uint16_t* a = static_cast<const uint16_t*>(pa);
  const uint16_t* b = static_cast<const uint16_t*>(pb);
  uint16_t* d0 = static_cast<uint16_t*>(pd0);
  uint16_t* d1 = static_cast<uint16_t*>(pd1);
  const __m256 vdiv = _mm256_set1_ps(static_cast<float>(divisor));
  auto block = [&](const uint16_t* x, const uint16_t* y) CHORUS_TARGET_AVX2 {
    __m256 xlo, xhi, ylo, yhi;
    V::load(x, &xlo, &xhi);
    V::load(y, &ylo, &yhi);
    return V::pack(vecOp<K>(xlo, ylo, vdiv), vecOp<K>(xhi, yhi, vdiv));
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r = block(a + i, b + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d0 + i), r);
    if constexpr (Dual) _mm256_storeu_si256(reinterpret_cast<__m256i*>(d1 + i), r);
  }
  if (i < n) {
    const size_t bytes = (n - i) * sizeof(uint16_t);
    uint16_t ta[16] = {}, tb[16] = {}, tr[16];
    std::memcpy(ta, a + i, bytes);
    std::memcpy(tb, b + i, bytes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tr), block(ta, tb));
    std::memcpy(d0 + i, tr, bytes);
    if constexpr (Dual) std::memcpy(d1 + i, tr, bytes);
  }
}

template <class V>
CHORUS_TARGET_AVX2 CHORUS_INLINE void scale16Avx2(size_t n, const void* psrc, void* pdst,
                                                  int divisor) {
  const uint16_t* src = static_cast<const uint16_t*>(psrc);
  uint16_t* dst = static_cast<uint16_t*>(pdst);
  const __m256 vdiv = _mm256_set1_ps(static_cast<float>(divisor));
  auto block = [&](const uint16_t* x) CHORUS_TARGET_AVX2 {
    __m256 lo, hi;
    V::load(x, &lo, &hi);
    return V::pack(_mm256_div_ps(lo, vdiv), _mm256_div_ps(hi, vdiv));
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), block(src + i));
  }
  if (i < n) {
    const size_t bytes = (n - i) * sizeof(uint16_t);
    uint16_t ts[16] = {}, tr[16];
    std::memcpy(ts, src + i, bytes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tr), block(ts));
    std::memcpy(dst + i, tr, bytes);
  }
}
// ---- The AVX-512 build (F, BW, VL, DQ). Integer and IEEE types: the same plain loops,
// auto-vectorised 512 bits wide (with DQ's 64-bit multiply and F's 64-bit max/min, which AVX2
// lacks). 16-bit floats: 32 values per step as two __m512; the tail uses masked loads that fill
// with zeros and a masked store, i.e. exactly the AVX2 build's zero-padded block.
template <RedKind K>
CHORUS_TARGET_AVX512 CHORUS_INLINE __m512 vecOp512(__m512 a, __m512 b, __m512 divisor) {
  if constexpr (K == RedKind::kSum) {
    return _mm512_add_ps(a, b);
  } else if constexpr (K == RedKind::kProd) {
    return _mm512_mul_ps(a, b);
  } else if constexpr (K == RedKind::kMax) {
    return _mm512_max_ps(b, a);  // b > a ? b : a
  } else if constexpr (K == RedKind::kMin) {
    return _mm512_min_ps(b, a);  // b < a ? b : a
  } else {
    return _mm512_div_ps(_mm512_add_ps(a, b), divisor);
  }
}

struct HalfVec512 {
  static CHORUS_TARGET_AVX512 CHORUS_INLINE void split(__m512i x, __m512* lo, __m512* hi) {
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
  }
  static CHORUS_TARGET_AVX512 CHORUS_INLINE __m512i pack(__m512 lo, __m512 hi) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, kRound)),
                              _mm512_cvtps_ph(hi, kRound), 1);
  }
};

// bfloat16 with integer ops (not AVX512_BF16's VCVTNE2PS2BF16, which flushes subnormals).
struct Bf16Vec512 {
  static CHORUS_TARGET_AVX512 CHORUS_INLINE void split(__m512i x, __m512* lo, __m512* hi) {
    const __m512i zero = _mm512_setzero_si512();
    *lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, x));
    *hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, x));
  }
  static CHORUS_TARGET_AVX512 CHORUS_INLINE __m512i narrow(__m512 v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i top = _mm512_srli_epi32(x, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(top, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __mmask16 isNan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i quiet = _mm512_or_si512(top, _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(isNan, rounded, quiet);
  }
  static CHORUS_TARGET_AVX512 CHORUS_INLINE __m512i pack(__m512 lo, __m512 hi) {
    return _mm512_packus_epi32(narrow(lo), narrow(hi));  // in-lane, undoes split's order
  }
};

template <class V, RedKind K, bool Dual>
CHORUS_TARGET_AVX512 CHORUS_INLINE void reduce16Avx512(size_t n, const void* pa, const void* pb,
                                                       void* pd0, void* pd1, int divisor) {
  const uint16_t* a = static_cast<const uint16_t*>(pa);
  const uint16_t* b = static_cast<const uint16_t*>(pb);
  uint16_t* d0 = static_cast<uint16_t*>(pd0);
  uint16_t* d1 = static_cast<uint16_t*>(pd1);
  const __m512 vdiv = _mm512_set1_ps(static_cast<float>(divisor));
  auto block = [&](__m512i x, __m512i y) CHORUS_TARGET_AVX512 {
    __m512 xlo, xhi, ylo, yhi;
    V::split(x, &xlo, &xhi);
    V::split(y, &ylo, &yhi);
    return V::pack(vecOp512<K>(xlo, ylo, vdiv), vecOp512<K>(xhi, yhi, vdiv));
  };
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i r = block(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i));
    _mm512_storeu_si512(d0 + i, r);
    if constexpr (Dual) _mm512_storeu_si512(d1 + i, r);
  }
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1u);
    const __m512i r = block(_mm512_maskz_loadu_epi16(m, a + i), _mm512_maskz_loadu_epi16(m, b + i));
    _mm512_mask_storeu_epi16(d0 + i, m, r);
    if constexpr (Dual) _mm512_mask_storeu_epi16(d1 + i, m, r);
  }
}

template <class V>
CHORUS_TARGET_AVX512 CHORUS_INLINE void scale16Avx512(size_t n, const void* psrc, void* pdst,
                                                      int divisor) {
  const uint16_t* src = static_cast<const uint16_t*>(psrc);
  uint16_t* dst = static_cast<uint16_t*>(pdst);
  const __m512 vdiv = _mm512_set1_ps(static_cast<float>(divisor));
  auto block = [&](__m512i x) CHORUS_TARGET_AVX512 {
    __m512 lo, hi;
    V::split(x, &lo, &hi);
    return V::pack(_mm512_div_ps(lo, vdiv), _mm512_div_ps(hi, vdiv));
  };
  size_t i = 0;
  for (; i + 32 <= n; i += 32) _mm512_storeu_si512(dst + i, block(_mm512_loadu_si512(src + i)));
  if (i < n) {
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1u);
    _mm512_mask_storeu_epi16(dst + i, m, block(_mm512_maskz_loadu_epi16(m, src + i)));
  }
}
#endif  // CHORUS_REDUCE_X86

// ---- One out-of-line entry point per combination and instruction set. ----

using ReduceFn = void (*)(size_t, const void*, const void*, void*, void*, int);
using ScaleFn = void (*)(size_t, const void*, void*, int);

template <class F, RedKind K, bool Dual>
void reducePortable(size_t n, const void* a, const void* b, void* d0, void* d1, int divisor) {
  reduceLoop<F, K, Dual>(n, a, b, d0, d1, divisor);
}

template <class F>
void scalePortable(size_t n, const void* src, void* dst, int divisor) {
  scaleLoop<F>(n, src, dst, divisor);
}

#ifdef CHORUS_REDUCE_X86
template <class F, RedKind K, bool Dual>
CHORUS_TARGET_AVX2 void reduceAvx2(size_t n, const void* a, const void* b, void* d0, void* d1,
                                   int divisor) {
  if constexpr (std::is_same_v<F, HalfElem>) {
    reduce16Avx2<HalfVec, K, Dual>(n, a, b, d0, d1, divisor);
  } else if constexpr (std::is_same_v<F, Bf16Elem>) {
    reduce16Avx2<Bf16Vec, K, Dual>(n, a, b, d0, d1, divisor);
  } else {
    reduceLoop<F, K, Dual>(n, a, b, d0, d1, divisor);
  }
}

template <class F>
CHORUS_TARGET_AVX2 void scaleAvx2(size_t n, const void* src, void* dst, int divisor) {
  if constexpr (std::is_same_v<F, HalfElem>) {
    scale16Avx2<HalfVec>(n, src, dst, divisor);
  } else if constexpr (std::is_same_v<F, Bf16Elem>) {
    scale16Avx2<Bf16Vec>(n, src, dst, divisor);
  } else {
    scaleLoop<F>(n, src, dst, divisor);
  }
}

template <class F, RedKind K, bool Dual>
CHORUS_TARGET_AVX512 void reduceAvx512(size_t n, const void* a, const void* b, void* d0, void* d1,
                                       int divisor) {
  if constexpr (std::is_same_v<F, HalfElem>) {
    reduce16Avx512<HalfVec512, K, Dual>(n, a, b, d0, d1, divisor);
  } else if constexpr (std::is_same_v<F, Bf16Elem>) {
    reduce16Avx512<Bf16Vec512, K, Dual>(n, a, b, d0, d1, divisor);
  } else {
    reduceLoop<F, K, Dual>(n, a, b, d0, d1, divisor);
  }
}

template <class F>
CHORUS_TARGET_AVX512 void scaleAvx512(size_t n, const void* src, void* dst, int divisor) {
  if constexpr (std::is_same_v<F, HalfElem>) {
    scale16Avx512<HalfVec512>(n, src, dst, divisor);
  } else if constexpr (std::is_same_v<F, Bf16Elem>) {
    scale16Avx512<Bf16Vec512>(n, src, dst, divisor);
  } else {
    scaleLoop<F>(n, src, dst, divisor);
  }
}
#endif

template <KernelIsa Isa, class F, RedKind K>
ReduceFn reduceEntry(bool dual) {
#ifdef CHORUS_REDUCE_X86
  if constexpr (Isa == KernelIsa::kAvx2) {
    return dual ? &reduceAvx2<F, K, true> : &reduceAvx2<F, K, false>;
  }
  if constexpr (Isa == KernelIsa::kAvx512) {
    return dual ? &reduceAvx512<F, K, true> : &reduceAvx512<F, K, false>;
  }
#endif
  return dual ? &reducePortable<F, K, true> : &reducePortable<F, K, false>;
}

template <KernelIsa Isa, class F>
ReduceFn reduceForOp(RedKind kind, bool dual) {
  switch (kind) {
    case RedKind::kSum:
      return reduceEntry<Isa, F, RedKind::kSum>(dual);
    case RedKind::kProd:
      return reduceEntry<Isa, F, RedKind::kProd>(dual);
    case RedKind::kMax:
      return reduceEntry<Isa, F, RedKind::kMax>(dual);
    case RedKind::kMin:
      return reduceEntry<Isa, F, RedKind::kMin>(dual);
    case RedKind::kAvg:
      return reduceEntry<Isa, F, RedKind::kAvg>(dual);
  }
  return nullptr;
}

template <KernelIsa Isa, class F>
ScaleFn scaleEntry() {
#ifdef CHORUS_REDUCE_X86
  if constexpr (Isa == KernelIsa::kAvx2) return &scaleAvx2<F>;
  if constexpr (Isa == KernelIsa::kAvx512) return &scaleAvx512<F>;
#endif
  return &scalePortable<F>;
}

template <KernelIsa Isa>
ReduceFn pickReduce(chorusDataType_t type, RedKind kind, bool dual) {
  return withElem<ReduceFn>(type,
                            [&]<class F>() -> ReduceFn { return reduceForOp<Isa, F>(kind, dual); });
}

template <KernelIsa Isa>
ScaleFn pickScale(chorusDataType_t type) {
  return withElem<ScaleFn>(type, []<class F>() -> ScaleFn { return scaleEntry<Isa, F>(); });
}

bool cpuHasAvx2F16c() {
#ifdef CHORUS_REDUCE_X86
  // avx2 here also checks that the OS saves the ymm registers. F16C is CPUID.1:ECX bit 29
  // (every AVX2 CPU has it, but check rather than assume).
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  return f16c && __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#ifdef CHORUS_REDUCE_X86
  // __builtin_cpu_supports reports avx512* only when the OS also saves the zmm/opmask state.
  __builtin_cpu_init();
  return cpuHasAvx2F16c() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool cpuSupports(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable:
      return true;
    case KernelIsa::kAvx2:
      return cpuHasAvx2F16c();
    case KernelIsa::kAvx512:
      return cpuHasAvx512();
  }
  return false;
}

// The widest build this CPU runs, capped by CHORUS_SIMD (read once, at the first kernel call):
// scalar|portable, avx2, avx512, or auto (the default). A build the CPU lacks falls back to the
// widest one below it. `forced`: CHORUS_SIMD named a build, so every type and op uses it (auto
// uses AVX-512 only where it pays, see avx512Pays).
struct IsaChoice {
  KernelIsa isa = KernelIsa::kPortable;
  bool forced = false;
};

IsaChoice chooseIsa() {
  IsaChoice c;
  KernelIsa cap = KernelIsa::kAvx512;
  if (const char* v = std::getenv("CHORUS_SIMD"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    if (s == "scalar" || s == "portable") {
      cap = KernelIsa::kPortable;
      c.forced = true;
    } else if (s == "avx2") {
      cap = KernelIsa::kAvx2;
      c.forced = true;
    } else if (s == "avx512") {
      c.forced = true;
    } else if (s != "auto") {
      std::fprintf(stderr,
                   "chorus: CHORUS_SIMD=%s is not one of scalar, portable, avx2, avx512, auto; "
                   "using auto\n",
                   v);
    }
  }
  for (int i = static_cast<int>(cap); i >= 0; --i) {
    if (cpuSupports(static_cast<KernelIsa>(i))) {
      c.isa = static_cast<KernelIsa>(i);
      break;
    }
  }
  return c;
}

const IsaChoice& isaChoice() {
  static const IsaChoice c = chooseIsa();
  return c;
}

// Where the AVX-512 build beats the AVX2 one (reduce_kernel_bench, docs/performance.md
// "Reduction kernels"): bfloat16 (its rounding is integer work, twice as much per instruction)
// and the 64-bit integer multiply, max and min (AVX2 has no vpmullq/vpmaxsq/vpminsq, so its build
// runs them nearly scalar). Elsewhere AVX-512 gains nothing measurable (the loops are load/store
// bound: at 32 KiB the data already streams from L2, at 64 MiB from memory) and loses when the
// buffers are not 64-byte aligned (every 512-bit access then splits a cache line), so the AVX2
// build stays.
bool avx512Pays(chorusDataType_t type, RedKind kind) {
  if (type == chorusBfloat16) return true;
  if (type == chorusInt64 || type == chorusUint64) {
    return kind == RedKind::kProd || kind == RedKind::kMax || kind == RedKind::kMin;
  }
  return false;
}

KernelIsa isaFor(chorusDataType_t type, RedKind kind) {
  const IsaChoice& c = isaChoice();
  if (c.isa == KernelIsa::kAvx512 && !c.forced && !avx512Pays(type, kind)) return KernelIsa::kAvx2;
  return c.isa;
}

constexpr int kNumKinds = 5;

ReduceFn pickReduceIsa(KernelIsa isa, chorusDataType_t type, RedKind kind, bool dual) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return pickReduce<KernelIsa::kAvx512>(type, kind, dual);
    case KernelIsa::kAvx2:
      return pickReduce<KernelIsa::kAvx2>(type, kind, dual);
    case KernelIsa::kPortable:
      return pickReduce<KernelIsa::kPortable>(type, kind, dual);
  }
  return nullptr;
}

ScaleFn pickScaleIsa(KernelIsa isa, chorusDataType_t type) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return pickScale<KernelIsa::kAvx512>(type);
    case KernelIsa::kAvx2:
      return pickScale<KernelIsa::kAvx2>(type);
    case KernelIsa::kPortable:
      return pickScale<KernelIsa::kPortable>(type);
  }
  return nullptr;
}

}  // namespace

KernelIsa bestKernelIsa() {
  return isaChoice().isa;
}

bool kernelIsaSupported(KernelIsa isa) {
  return cpuSupports(isa);
}

const char* kernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kPortable:
      return "portable";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

void reduceKernelIsa(KernelIsa isa, chorusDataType_t type, chorusRedOp_t op, size_t count,
                     const void* a, const void* b, void* dst0, void* dst1, int avgDivisor) {
  RedKind kind;
  if (count == 0 || !toRedKind(op, avgDivisor, &kind)) return;
  const bool dual = dst1 != nullptr;
  const ReduceFn fn = pickReduceIsa(isa, type, kind, dual);
  if (fn != nullptr) fn(count, a, b, dst0, dst1, avgDivisor);
}

namespace {

// The entry point of every (type, op, one or two destinations), filled once at the first call:
// reduceKernel only indexes it. (scaleKernel, off the hot path, picks through kernelIsaFor.)
struct KernelTable {
  ReduceFn reduce[chorusNumTypes][kNumKinds][2];
};

const KernelTable& kernelTable() {
  static const KernelTable table = [] {
    KernelTable t{};
    for (int ty = 0; ty < chorusNumTypes; ++ty) {
      const auto type = static_cast<chorusDataType_t>(ty);
      for (int k = 0; k < kNumKinds; ++k) {
        const auto kind = static_cast<RedKind>(k);
        for (int dual = 0; dual < 2; ++dual) {
          t.reduce[ty][k][dual] = pickReduceIsa(isaFor(type, kind), type, kind, dual != 0);
        }
      }
    }
    return t;
  }();
  return table;
}

}  // namespace

KernelIsa kernelIsaFor(chorusDataType_t type, chorusRedOp_t op) {
  RedKind kind;
  if (!toRedKind(op, 1, &kind)) return bestKernelIsa();
  return isaFor(type, kind);
}

void reduceKernel(chorusDataType_t type, chorusRedOp_t op, size_t count, const void* a,
                  const void* b, void* dst0, void* dst1, int avgDivisor) {
  RedKind kind;
  if (count == 0 || !toRedKind(op, avgDivisor, &kind)) return;
  if (static_cast<unsigned>(type) >= static_cast<unsigned>(chorusNumTypes)) return;
  const ReduceFn fn = kernelTable().reduce[type][static_cast<int>(kind)][dst1 != nullptr];
  if (fn != nullptr) fn(count, a, b, dst0, dst1, avgDivisor);
}

void scaleKernelIsa(KernelIsa isa, chorusDataType_t type, size_t count, const void* src, void* dst,
                    int divisor) {
  if (count == 0) return;
  if (divisor <= 1) {
    const size_t size =
        withElem<size_t>(type, []<class F>() -> size_t { return sizeof(typename F::Storage); });
    if (src != dst && size != 0) std::memcpy(dst, src, count * size);
    return;
  }
  const ScaleFn fn = pickScaleIsa(isa, type);
  if (fn != nullptr) fn(count, src, dst, divisor);
}

void scaleKernel(chorusDataType_t type, size_t count, const void* src, void* dst, int divisor) {
  scaleKernelIsa(kernelIsaFor(type, chorusAvg), type, count, src, dst, divisor);
}

}  // namespace chorus
