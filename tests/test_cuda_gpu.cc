// GPU runtime tests of the CUDA backend. They need a CUDA build and a GPU; elsewhere (CI) every
// test is skipped with the reason. See docs/cuda.md for what still has to run on a GPU.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_matrix.h"
#include "run_command.h"
#include "scoped_env.h"
#include "threads.h"

#ifdef CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/kernels.h"
#include "reduce/reduce.h"
#endif

namespace {

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    std::string why_;                                                        \
    if (!ctest::cudaDeviceUsable(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

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
#ifndef CHORUS_HAVE_CUDA_IPC
  GTEST_SKIP() << "built without -DCHORUS_CUDA_IPC=ON";
#endif
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
      chorusCommDestroy(comms[size_t(r)]);
    }
  }
  const ctest::CommandResult r = ctest::runCommand(
      {CHORUSRUN_PATH, "--timeout", "500", "-np", std::to_string(n), CUDA_WORKER_PATH}, 530);
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
#ifndef CHORUS_HAVE_CUDA_IPC
  GTEST_SKIP() << "built without -DCHORUS_CUDA_IPC=ON";
#endif
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
  const ctest::CommandResult r =
      ctest::runCommand({CHORUSRUN_PATH, "--timeout", "500", "-np", std::to_string(n),
                         CUDA_WORKER_PATH, "--ipc-allreduce"},
                        530);
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
  const ctest::CommandResult r = ctest::runCommand(
      {CHORUSRUN_PATH, "--timeout", "500", "-np", std::to_string(np), CUDA_WORKER_PATH}, 530);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 0) << r.output;
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaGpuProcesses, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
