// GPU runtime tests of the CUDA backend. They need a CUDA build and a GPU; elsewhere (CI) every
// test is skipped with the reason, and with CHORUS_TEST_REQUIRE_GPU=1 (the GPU machine's run,
// scripts/device_check.sh) every such skip is a failure instead. See docs/cuda.md for what still
// has to run on a GPU.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/backend.h"
#include "cuda_matrix.h"
#include "run_command.h"
#include "scoped_env.h"
#include "threads.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "base/half.h"
#include "cuda/kernels.h"
#include "reduce/reduce.h"
#endif

namespace {

// CHORUS_TEST_REQUIRE_GPU=1: a GPU test that cannot run fails (a run on the GPU machine must not
// pass by skipping).
bool requireGpu() {
  const char* v = std::getenv("CHORUS_TEST_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

#define SKIP_OR_FAIL(why)                                               \
  do {                                                                  \
    const std::string why2_ = (why);                                    \
    if (requireGpu()) FAIL() << "CHORUS_TEST_REQUIRE_GPU=1: " << why2_; \
    GTEST_SKIP() << why2_;                                              \
  } while (0)

#define SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                 \
    std::string why_;                                                                  \
    if (!ctest::cudaDeviceUsable(&why_)) SKIP_OR_FAIL(std::string("no GPU: ") + why_); \
  } while (0)

#ifdef CHORUS_HAVE_CUDA_IPC
#define SKIP_WITHOUT_IPC_BUILD() \
  do {                           \
  } while (0)
#else
#define SKIP_WITHOUT_IPC_BUILD() SKIP_OR_FAIL("built without -DCHORUS_CUDA_IPC=ON")
#endif

// chorusrun's --timeout for the process tests: CHORUS_TEST_CHORUSRUN_TIMEOUT seconds (the device
// check sets 90, so that a hang costs 90 s of the GPU machine's minutes, not 500), default 500.
int chorusrunTimeout() {
  const char* v = std::getenv("CHORUS_TEST_CHORUSRUN_TIMEOUT");
  const int t = v != nullptr ? std::atoi(v) : 0;
  return t > 0 ? t : 500;
}

// chorusrun -np `np` CUDA_WORKER_PATH `args`, bounded by chorusrunTimeout() (+30 s for the
// launcher to report).
ctest::CommandResult runWorkers(int np, const std::vector<std::string>& args = {}) {
  std::vector<std::string> cmd = {
      CHORUSRUN_PATH, "--timeout",        std::to_string(chorusrunTimeout()),
      "-np",          std::to_string(np), CUDA_WORKER_PATH};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return ctest::runCommand(cmd, chorusrunTimeout() + 30);
}

// CHORUS_TEST_REQUIRE_GPU without a GPU (or without CUDA in the build): this test fails, so the
// switch is known to work wherever it is set.
TEST(CudaGpu, RequireGpuSwitch) {
  SKIP_WITHOUT_GPU();
  SUCCEED();
}

#ifdef CHORUS_HAVE_CUDA
// Every kernel against the host engine, bit for bit (NaN for NaN), aligned and misaligned.
TEST(CudaGpu, KernelsMatchHostEngine) {
  SKIP_WITHOUT_GPU();
  const chorusDataType_t types[] = {chorusInt8,    chorusUint8,  chorusInt32,   chorusUint32,
                                    chorusInt64,   chorusUint64, chorusFloat16, chorusBfloat16,
                                    chorusFloat32, chorusFloat64};
  const size_t n = 100003;
  std::mt19937_64 rng(5);
  for (chorusDataType_t t : types) {
    const size_t esz = chorusTypeSize(t);
    std::vector<unsigned char> a((n + 1) * esz), b((n + 1) * esz);
    for (auto& x : a) x = static_cast<unsigned char>(rng());
    for (auto& x : b) x = static_cast<unsigned char>(rng());
    void *da, *db, *dd0, *dd1;
    ASSERT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
    cudaMalloc(&db, b.size());
    cudaMalloc(&dd0, a.size());
    cudaMalloc(&dd1, a.size());
    cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
    for (size_t shift : {size_t{0}, esz}) {  // shift: pointers off 16-byte alignment
      for (chorusRedOp_t op : {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg}) {
        for (int div : op == chorusAvg ? std::vector<int>{0, 3} : std::vector<int>{0}) {
          auto* pa = static_cast<unsigned char*>(da) + shift;
          auto* pb = static_cast<unsigned char*>(db) + shift;
          ASSERT_EQ(chorus::cuda::launchReduce(t, op, n, pa, pb, dd0, dd1, div, nullptr), 0);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<unsigned char> got(n * esz), got1(n * esz), want(n * esz);
          cudaMemcpy(got.data(), dd0, got.size(), cudaMemcpyDeviceToHost);
          cudaMemcpy(got1.data(), dd1, got1.size(), cudaMemcpyDeviceToHost);
          chorus::reduceKernel(t, op, n, a.data() + shift, b.data() + shift, want.data(), nullptr,
                               div);
          EXPECT_EQ(got, got1);
          size_t bad = 0;
          for (size_t i = 0; i < n; ++i) {
            if (std::memcmp(&got[i * esz], &want[i * esz], esz) == 0) continue;
            // NaN payloads may differ (hardware conversions): both must be NaN.
            float g = 0, w = 0;
            if (t == chorusFloat32)
              std::memcpy(&g, &got[i * esz], 4), std::memcpy(&w, &want[i * esz], 4);
            if (t == chorusFloat32 && g != g && w != w) continue;
            if (t == chorusFloat16 || t == chorusBfloat16) {
              uint16_t gh, wh;
              std::memcpy(&gh, &got[i * esz], 2);
              std::memcpy(&wh, &want[i * esz], 2);
              const uint16_t inf = t == chorusFloat16 ? 0x7c00 : 0x7f80;
              if ((gh & 0x7fff) > inf && (wh & 0x7fff) > inf) continue;
            }
            if (t == chorusFloat64) {
              double gd, wd;
              std::memcpy(&gd, &got[i * esz], 8);
              std::memcpy(&wd, &want[i * esz], 8);
              if (gd != gd && wd != wd) continue;
            }
            ++bad;
          }
          EXPECT_EQ(bad, 0u) << "type " << int(t) << " op " << int(op) << " div " << div
                             << " shift " << shift;
        }
      }
    }
    // Copy kernel, dual destination.
    ASSERT_EQ(chorus::cuda::launchCopy(dd0, dd1, da, n * esz, nullptr), 0);
    cudaDeviceSynchronize();
    std::vector<unsigned char> c0(n * esz), c1(n * esz);
    cudaMemcpy(c0.data(), dd0, c0.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(c1.data(), dd1, c1.size(), cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::memcmp(c0.data(), a.data(), c0.size()), 0);
    EXPECT_EQ(c0, c1);
    cudaFree(da), cudaFree(db), cudaFree(dd0), cudaFree(dd1);
  }
}

#ifdef CHORUS_HAVE_CUDA_IPC
// Element i of `got` equals `want` bit for bit, or both are NaN (NaN payloads may differ between
// the hardware and the host conversions).
bool sameElement(chorusDataType_t t, const unsigned char* got, const unsigned char* want) {
  const size_t esz = chorusTypeSize(t);
  if (std::memcmp(got, want, esz) == 0) return true;
  if (t == chorusFloat32) {
    float g, w;
    std::memcpy(&g, got, 4), std::memcpy(&w, want, 4);
    return g != g && w != w;
  }
  if (t == chorusFloat64) {
    double g, w;
    std::memcpy(&g, got, 8), std::memcpy(&w, want, 8);
    return g != g && w != w;
  }
  if (t == chorusFloat16 || t == chorusBfloat16) {
    uint16_t g, w;
    std::memcpy(&g, got, 2), std::memcpy(&w, want, 2);
    const uint16_t inf = t == chorusFloat16 ? 0x7c00 : 0x7f80;
    return (g & 0x7fff) > inf && (w & 0x7fff) > inf;
  }
  return false;
}

// The reference of launchReduceMany: the k inputs folded in rank order by the host engine
// (chorus::reduceKernel; avg: sums, then the last step divides by k), float16 / bfloat16 widened
// to float32, folded and rounded once at the end (cuda/functors.h's ReduceManyFunctor).
std::vector<unsigned char> reduceManyReference(chorusDataType_t t, chorusRedOp_t op, size_t n,
                                               const std::vector<std::vector<unsigned char>>& in) {
  const int k = int(in.size());
  const bool half = t == chorusFloat16 || t == chorusBfloat16;
  const chorusDataType_t ct = half ? chorusFloat32 : t;
  const size_t cesz = chorusTypeSize(ct);
  auto widen = [&](const std::vector<unsigned char>& x) {
    if (!half) return std::vector<unsigned char>(x.begin(), x.begin() + long(n * cesz));
    std::vector<unsigned char> w(n * 4);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, &x[i * 2], 2);
      const float f = t == chorusFloat16 ? chorus::halfToFloat(h) : chorus::bf16ToFloat(h);
      std::memcpy(&w[i * 4], &f, 4);
    }
    return w;
  };
  std::vector<unsigned char> acc = widen(in[0]);
  for (int q = 1; q < k; ++q) {
    const std::vector<unsigned char> x = widen(in[size_t(q)]);
    const int div = op == chorusAvg && q == k - 1 ? k : 0;
    chorus::reduceKernel(ct, op, n, acc.data(), x.data(), acc.data(), nullptr, div);
  }
  if (!half) return acc;
  std::vector<unsigned char> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, &acc[i * 4], 4);
    const uint16_t h = t == chorusFloat16 ? chorus::floatToHalf(f) : chorus::floatToBf16(f);
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

// The direct IPC AllReduce's kernel (launchReduceMany: reduceManyKernel, the one production
// runs) against the host engine: 1, 2, 3, 5 and 16 inputs, every type and op; inputs are random
// bytes (negative values, integer wrap, NaN, Inf, subnormals) mixed with small signed fractions
// (sums that round, in float16 / bfloat16 differently per summation order); pointers 16-byte
// aligned and misaligned; outputs separate, all in place (output q == input q, as a rank whose
// sendbuff is its recvbuff), and mixed.
TEST(CudaGpu, ReduceManyMatchesHostEngine) {
  SKIP_WITHOUT_GPU();
  const chorusDataType_t types[] = {chorusInt8,    chorusUint8,  chorusInt32,   chorusUint32,
                                    chorusInt64,   chorusUint64, chorusFloat16, chorusBfloat16,
                                    chorusFloat32, chorusFloat64};
  const size_t n = 40009;  // a multiple of no lane count: the vector loop and the tail both run
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> small(-8.0, 8.0);
  int launches = 0;
  for (chorusDataType_t t : types) {
    const size_t esz = chorusTypeSize(t);
    const size_t stride = ((n + 1) * esz + 255) / 256 * 256;  // per array, 256-byte aligned
    for (int k : {1, 2, 3, 5, 16}) {
      // Inputs and outputs: k arrays each, one allocation.
      std::vector<std::vector<unsigned char>> host(static_cast<size_t>(k),
                                                   std::vector<unsigned char>(stride));
      for (auto& h : host) {
        for (auto& b : h) b = static_cast<unsigned char>(rng());
        for (size_t i = 0; i < n + 1; i += 2) {  // every other element a small signed value
          const double v = small(rng);
          unsigned char* e = &h[i * esz];
          if (t == chorusFloat32) {
            const float f = float(v);
            std::memcpy(e, &f, 4);
          } else if (t == chorusFloat64) {
            std::memcpy(e, &v, 8);
          } else if (t == chorusFloat16 || t == chorusBfloat16) {
            const uint16_t x =
                t == chorusFloat16 ? chorus::floatToHalf(float(v)) : chorus::floatToBf16(float(v));
            std::memcpy(e, &x, 2);
          } else {
            const int64_t x = int64_t(v * 4);
            std::memcpy(e, &x, esz);  // little-endian: the low bytes, sign-wrapped
          }
        }
      }
      unsigned char* dev = nullptr;
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), 2 * size_t(k) * stride), cudaSuccess);
      for (size_t shift : {size_t{0}, esz}) {
        std::vector<std::vector<unsigned char>> shifted(static_cast<size_t>(k));
        for (int q = 0; q < k; ++q)
          shifted[size_t(q)].assign(host[size_t(q)].begin() + long(shift),
                                    host[size_t(q)].begin() + long(shift + n * esz));
        for (chorusRedOp_t op : {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg}) {
          const std::vector<unsigned char> want = reduceManyReference(t, op, n, shifted);
          for (int mode = 0; mode < 3; ++mode) {  // 0 separate, 1 all in place, 2 odd q in place
            std::vector<const void*> in(static_cast<size_t>(k));
            std::vector<void*> out(static_cast<size_t>(k));
            for (int q = 0; q < k; ++q) {
              unsigned char* ip = dev + size_t(q) * stride;
              ASSERT_EQ(cudaMemcpy(ip, host[size_t(q)].data(), stride, cudaMemcpyHostToDevice),
                        cudaSuccess);
              const bool inPlace = mode == 1 || (mode == 2 && q % 2 == 1);
              in[size_t(q)] = ip + shift;
              out[size_t(q)] = inPlace ? ip + shift : dev + size_t(k + q) * stride + shift;
            }
            ASSERT_EQ(chorus::cuda::launchReduceMany(t, op, n, k, in.data(), out.data(), nullptr),
                      0);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            ++launches;
            for (int q = 0; q < k; ++q) {
              std::vector<unsigned char> got(n * esz);
              ASSERT_EQ(cudaMemcpy(got.data(), out[size_t(q)], got.size(), cudaMemcpyDeviceToHost),
                        cudaSuccess);
              size_t bad = 0, first = 0;
              for (size_t i = 0; i < n; ++i)
                if (!sameElement(t, &got[i * esz], &want[i * esz]) && bad++ == 0) first = i;
              ASSERT_EQ(bad, 0u) << "type " << int(t) << " op " << int(op) << " inputs " << k
                                 << " shift " << shift << " mode " << mode << " output " << q
                                 << ": first wrong element " << first;
            }
          }
        }
      }
      cudaFree(dev);
    }
  }
  EXPECT_EQ(launches, 10 * 5 * 2 * 5 * 3);
}

// An IPC AllReduce while the user's stream is still busy (the first wait sees cudaErrorNotReady)
// and its buffers come from the registration cache (the second call on): the kernel launch must
// not report the query's NotReady as its own failure. 2 ranks as threads on GPU 0.
TEST(CudaGpuIpcDirect, BusyStreamWarmCache) {
  SKIP_WITHOUT_GPU();
  const int n = 2;
  ctest::ScopedEnv ipc("CHORUS_CUDA_IPC", "1");
  std::vector<chorusComm_t> comms(static_cast<size_t>(n));
  const std::vector<int> devs(static_cast<size_t>(n), 0);
  ASSERT_EQ(chorusCommInitAll(comms.data(), n, devs.data()), chorusSuccess)
      << chorusGetLastError(nullptr);
  std::vector<std::vector<std::string>> fails(static_cast<size_t>(n));
  ctest::runThreads(n, [&](int r) {
    auto& f = fails[size_t(r)];
    cudaSetDevice(0);
    const size_t count = 1 << 20, scratchBytes = size_t(256) << 20;
    cudaStream_t cs = nullptr;
    void *send = nullptr, *recv = nullptr, *scratch = nullptr;
    if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc(&send, count * 4) != cudaSuccess ||
        cudaMalloc(&recv, count * 4) != cudaSuccess ||
        cudaMalloc(&scratch, scratchBytes) != cudaSuccess) {
      f.push_back("CUDA setup failed");
      return;
    }
    chorusStream_t st = nullptr;
    if (chorusStreamCreateFromCuda(&st, cs) != chorusSuccess) {
      f.push_back("chorusStreamCreateFromCuda failed");
      return;
    }
    std::vector<float> h(count), got(count);
    for (size_t j = 0; j < count; ++j) h[j] = float((r + 1) * int(j % 7));
    for (int call = 0; call < 5 && f.empty(); ++call) {
      for (int m = 0; m < 8; ++m) cudaMemsetAsync(scratch, m, scratchBytes, cs);  // ~1 ms busy
      cudaMemcpyAsync(send, h.data(), count * 4, cudaMemcpyHostToDevice, cs);
      const chorusResult_t res =
          chorusAllReduce(send, recv, count, chorusFloat32, chorusSum, comms[size_t(r)], st);
      if (res != chorusSuccess) {
        f.push_back("call " + std::to_string(call) + ": " + chorusGetErrorString(res) + " " +
                    chorusGetLastError(comms[size_t(r)]));
        break;
      }
      chorusStreamSynchronize(st);
      cudaMemcpy(got.data(), recv, count * 4, cudaMemcpyDeviceToHost);
      for (size_t j = 0; j < count; ++j)
        if (got[j] != float(3 * int(j % 7))) {
          f.push_back("call " + std::to_string(call) + ": wrong value at " + std::to_string(j));
          break;
        }
    }
    const chorus::CudaIpcStats s = chorus::cudaIpcStats(comms[size_t(r)]);
    if (f.empty() && s.directCalls != 5)
      f.push_back("directCalls = " + std::to_string(s.directCalls) + ", expected 5 (fallbacks " +
                  std::to_string(s.fallbacks) + ")");
    chorusStreamDestroy(st);
    cudaFree(send), cudaFree(recv), cudaFree(scratch);
    cudaStreamDestroy(cs);
  });
  for (int r = 0; r < n; ++r) {
    for (const auto& f : fails[size_t(r)]) ADD_FAILURE() << "rank " << r << ": " << f;
    chorusCommDestroy(comms[size_t(r)]);
  }
}
#endif  // CHORUS_HAVE_CUDA_IPC

// A device collective on a stream being captured into a CUDA graph is refused with a message
// saying so (it would wait on the host inside the capture and invalidate it).
TEST(CudaGpu, StreamCaptureIsRefused) {
  SKIP_WITHOUT_GPU();
  chorusComm_t dev[1];
  const int devlist[1] = {0};
  ASSERT_EQ(chorusCommInitAll(dev, 1, devlist), chorusSuccess);
  cudaSetDevice(0);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4096), cudaSuccess);
  cudaStream_t cs = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  chorusStream_t st = nullptr;
  ASSERT_EQ(chorusStreamCreateFromCuda(&st, cs), chorusSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed), cudaSuccess);
  const chorusResult_t r = chorusAllReduce(d, d, 1024, chorusFloat32, chorusSum, dev[0], st);
  const std::string msg = chorusGetLastError(dev[0]);
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(cs, &g);
  if (g != nullptr) cudaGraphDestroy(g);
  (void)cudaGetLastError();
  EXPECT_EQ(r, chorusInvalidUsage) << msg;
  EXPECT_NE(msg.find("captured into a CUDA graph"), std::string::npos) << msg;
  chorusStreamDestroy(st);
  cudaStreamDestroy(cs);
  cudaFree(d);
  chorusCommDestroy(dev[0]);
}

// Host / device mixing is refused with a message naming the call, rank and argument.
TEST(CudaGpu, MixedBuffersAreRefused) {
  SKIP_WITHOUT_GPU();
  chorusComm_t dev[1], host[1];
  const int devlist[1] = {0};
  ASSERT_EQ(chorusCommInitAll(dev, 1, devlist), chorusSuccess);
  ASSERT_EQ(chorusCommInitAll(host, 1, nullptr), chorusSuccess);
  void* d = nullptr;
  cudaSetDevice(0);
  cudaMalloc(&d, 4096);
  std::vector<float> h(1024);
  EXPECT_EQ(chorusAllReduce(h.data(), d, 1024, chorusFloat32, chorusSum, dev[0], nullptr),
            chorusInvalidArgument);
  std::string msg = chorusGetLastError(dev[0]);
  EXPECT_NE(msg.find("chorusAllReduce (rank 0): sendbuff"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mixed"), std::string::npos) << msg;
  EXPECT_EQ(chorusAllReduce(d, d, 1024, chorusFloat32, chorusSum, host[0], nullptr),
            chorusInvalidArgument);
  msg = chorusGetLastError(host[0]);
  EXPECT_NE(msg.find("host communicator"), std::string::npos) << msg;
  EXPECT_EQ(chorusAllReduce(d, d, 1024, chorusFloat32, chorusSum, dev[0], nullptr), chorusSuccess)
      << chorusGetLastError(dev[0]);
  cudaFree(d);
  chorusCommDestroy(dev[0]);
  chorusCommDestroy(host[0]);
}
#endif

class CudaGpuThreads : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// 1, 2, 4 ranks sharing GPU 0 as threads of this process; null stream and a wrapped CUDA stream.
TEST_P(CudaGpuThreads, Matrix) {
  SKIP_WITHOUT_GPU();
  const int n = std::get<0>(GetParam());
  const bool useStream = std::get<1>(GetParam());
  std::vector<chorusComm_t> comms(static_cast<size_t>(n));
  const std::vector<int> devs(static_cast<size_t>(n), 0);
  ASSERT_EQ(chorusCommInitAll(comms.data(), n, devs.data()), chorusSuccess)
      << chorusGetLastError(nullptr);
  std::vector<std::vector<std::string>> fails(static_cast<size_t>(n));
  ctest::runThreads(n, [&](int r) {
    fails[size_t(r)] = ctest::runCudaMatrix(comms[size_t(r)], r, n, useStream);
  });
  for (int r = 0; r < n; ++r) {
    for (const auto& f : fails[size_t(r)]) ADD_FAILURE() << f;
    chorusCommDestroy(comms[size_t(r)]);
  }
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaGpuThreads,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks" +
                                  (std::get<1>(info.param) ? "_cudaStream" : "_nullStream");
                         });

class CudaGpuIpc : public ::testing::TestWithParam<int> {};

// CHORUS_CUDA_IPC=1 (AllReduce directly on the IPC-mapped user buffers; the other collectives
// staged): the whole matrix, threads sharing GPU 0, then processes.
TEST_P(CudaGpuIpc, Matrix) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_IPC_BUILD();
  const int n = GetParam();
  ctest::ScopedEnv ipc("CHORUS_CUDA_IPC", "1");
  {
    std::vector<chorusComm_t> comms(static_cast<size_t>(n));
    const std::vector<int> devs(static_cast<size_t>(n), 0);
    ASSERT_EQ(chorusCommInitAll(comms.data(), n, devs.data()), chorusSuccess)
        << chorusGetLastError(nullptr);
    std::vector<std::vector<std::string>> fails(static_cast<size_t>(n));
    ctest::runThreads(
        n, [&](int r) { fails[size_t(r)] = ctest::runCudaMatrix(comms[size_t(r)], r, n, false); });
    for (int r = 0; r < n; ++r) {
      for (const auto& f : fails[size_t(r)]) ADD_FAILURE() << "threads: " << f;
#ifdef CHORUS_HAVE_CUDA_IPC
      // The matrix's AllReduce calls took the direct path: none staged for want of IPC.
      const chorus::CudaIpcStats s = chorus::cudaIpcStats(comms[size_t(r)]);
      EXPECT_GT(s.directCalls, 0u) << "threads: rank " << r << ": every AllReduce was staged";
      EXPECT_EQ(s.fallbacks, 0u) << "threads: rank " << r << ": "
                                 << (s.fallbackReason ? s.fallbackReason : "");
#endif
      chorusCommDestroy(comms[size_t(r)]);
    }
  }
  // --expect-ipc: each worker fails unless its AllReduce calls took the direct path.
  const ctest::CommandResult r = runWorkers(n, {"--expect-ipc"});
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << "processes: " << r.output;
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaGpuIpc, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

class CudaGpuIpcDirect : public ::testing::TestWithParam<int> {};

// The direct IPC AllReduce on user buffers (CHORUS_CUDA_IPC=1): 2 and 4 ranks sharing GPU 0 as
// threads (buffers used by address), then as processes (buffers mapped with CUDA IPC); in and
// out of place, aligned and misaligned, odd counts, the registration cache's counters.
TEST_P(CudaGpuIpcDirect, AllReduce) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_IPC_BUILD();
  const int n = GetParam();
  ctest::ScopedEnv ipc("CHORUS_CUDA_IPC", "1");
  {
    std::vector<chorusComm_t> comms(static_cast<size_t>(n));
    const std::vector<int> devs(static_cast<size_t>(n), 0);
    ASSERT_EQ(chorusCommInitAll(comms.data(), n, devs.data()), chorusSuccess)
        << chorusGetLastError(nullptr);
    std::vector<std::vector<std::string>> fails(static_cast<size_t>(n));
    ctest::runThreads(
        n, [&](int r) { fails[size_t(r)] = ctest::runCudaIpcAllReduce(comms[size_t(r)], r, n); });
    for (int r = 0; r < n; ++r) {
      for (const auto& f : fails[size_t(r)]) ADD_FAILURE() << "threads: " << f;
      chorusCommDestroy(comms[size_t(r)]);
    }
  }
  const ctest::CommandResult r = runWorkers(n, {"--ipc-allreduce"});
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << "processes: " << r.output;
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaGpuIpcDirect, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

class CudaGpuProcesses : public ::testing::TestWithParam<int> {};

// 1, 2, 4 ranks sharing GPU 0 as processes (chorusrun).
TEST_P(CudaGpuProcesses, Matrix) {
  SKIP_WITHOUT_GPU();
  const int np = GetParam();
  const ctest::CommandResult r = runWorkers(np);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaGpuProcesses, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
