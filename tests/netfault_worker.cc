// chorus_netfault_worker: one rank of a network-fault test (tests/test_netfaults.cc,
// scripts/netfault_table.sh), started by chorusrun --netns so that each emulated node has its
// own network namespace the test can break (link down, packet loss, a firewall drop, the
// namespace deleted). It loops one collective and checks every result against a reference
// computed here, and prints its progress so that the test can inject the fault at a known point.
//
//   chorus_netfault_worker [--coll AllReduce|AllGather|SendRecv|Broadcast|ReduceScatter|Mix]
//                          [--count N] [--iters N] [--seconds S] [--linger-ms MS]
//                          [--watchdog SEC] [--hang-rank R --hang-file PATH]
//
//   --coll Mix      call i runs collective i % 5 of the five, on a count drawn from i between 1
//                   and --count (log-uniform), the root of Broadcast i % nranks: what the
//                   network soak runs (scripts/netfault_table.sh --soak)
//   --count N       elements (int32) per rank and call (default 65536 = 256 KiB)
//   --iters N       calls to make (0: no limit; default 0)
//   --seconds S     stop after S seconds of calls (default 0: no limit; every 10 calls the ranks
//                   agree whether to stop, so that a call slowed by the network ends the run
//                   soon after); the run stops at the first of --iters and --seconds
//   --linger-ms MS  after a failure, wait this long before exiting (default 3000): chorusrun ends
//                   the whole job on the first rank's exit, and the other ranks must have time to
//                   report what they saw
//   --watchdog SEC  exit 99 if not finished by then (default 120)
//   --hang-rank R, --hang-file PATH   rank R stops calling once PATH exists (looked for before
//                   each call): it prints HUNG and sleeps until the watchdog or a kill, while the
//                   others wait in their call (a rank that hangs, for the hang-under-loss row)
//
// Output (stdout, one line each; t = CLOCK_MONOTONIC seconds, shared by all processes):
//   READY rank=R nranks=N pid=P t=T
//   PROGRESS rank=R iter=I t=T          after call I (every call for the first 10, then every 10)
//   FAILED rank=R code=C name=NAME t=T iter=I culprit=F msg=MESSAGE
//   WRONG rank=R iter=I index=K got=G want=W   a result differs from the reference
//   DONE rank=R iters=I t=T seconds=S
//   HUNG rank=R iter=I t=T              --hang-rank: it stopped calling before call I
// Exit status: 0 DONE, 3 a call failed, 2 init failed or a result was wrong, 99 watchdog.
#include <chorus/chorus.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "result_name.h"
#include "timing.h"
#include "values.h"
#include "watchdog.h"

namespace {

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "chorus_netfault_worker: %s\n", msg.c_str());
  std::exit(2);
}

struct Options {
  std::string coll = "AllReduce";
  size_t count = 65536;
  long iters = 0;
  double seconds = 0;
  int lingerMs = 3000;
  double watchdog = 120;
  int hangRank = -1;
  std::string hangFile;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--coll") {
      o.coll = value();
      if (o.coll != "AllReduce" && o.coll != "AllGather" && o.coll != "SendRecv" &&
          o.coll != "Broadcast" && o.coll != "ReduceScatter" && o.coll != "Mix")
        usage("--coll: AllReduce, AllGather, SendRecv, Broadcast, ReduceScatter or Mix, not " +
              o.coll);
    } else if (a == "--count") {
      o.count = size_t(std::strtoull(value().c_str(), nullptr, 10));
      if (o.count == 0) usage("--count must be at least 1");
    } else if (a == "--iters") {
      o.iters = std::atol(value().c_str());
    } else if (a == "--seconds") {
      o.seconds = std::atof(value().c_str());
    } else if (a == "--linger-ms") {
      o.lingerMs = std::atoi(value().c_str());
    } else if (a == "--watchdog") {
      o.watchdog = std::atof(value().c_str());
    } else if (a == "--hang-rank") {
      o.hangRank = std::atoi(value().c_str());
    } else if (a == "--hang-file") {
      o.hangFile = value();
    } else {
      usage("unknown option " + a);
    }
  }
  if ((o.hangRank >= 0) != !o.hangFile.empty()) usage("--hang-rank and --hang-file go together");
  return o;
}

// Rank r's input in call `it`: small integers, so that sums are exact whatever the order.
int32_t input(int r, long it, size_t k) {
  return int32_t((uint64_t(r) * 7919u + uint64_t(it) * 104729u + k * 31u) % 1000u) - 500;
}

const char* const kMix[] = {"AllReduce", "AllGather", "SendRecv", "Broadcast", "ReduceScatter"};

// Call `it`'s count under --coll Mix: log-uniform in [1, max], the same on every rank.
size_t mixCount(long it, size_t max) {
  const double u = double(ctest::mix(0, 0, uint64_t(it)) % 1000000u) / 1e6;  // [0, 1)
  const size_t c = size_t(std::exp(u * std::log(double(max) + 1.0)));
  return std::clamp<size_t>(c, 1, max);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ctest::Watchdog watchdog(o.watchdog, "chorus_netfault_worker: not finished");
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitFromEnv(&comm);
  if (r != chorusSuccess) {
    std::printf("INITFAILED code=%d name=%s msg=%s\n", int(r), ctest::resultName(r),
                chorusGetLastError(nullptr));
    return 2;
  }
  int rank = -1, nranks = -1;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &nranks);
  const bool mix = o.coll == "Mix";
  // Room for the largest call: AllGather's output and ReduceScatter's input are n per rank.
  std::vector<int32_t> send(o.count * size_t(nranks)), recv(o.count * size_t(nranks)),
      want(recv.size());
  std::printf("READY rank=%d nranks=%d pid=%d t=%.6f\n", rank, nranks, int(getpid()),
              ctest::nowSeconds());
  std::fflush(stdout);
  const double start = ctest::nowSeconds();
  long it = 0;
  for (; o.iters == 0 || it < o.iters; ++it) {
    const std::string coll = mix ? kMix[it % 5] : o.coll;
    const size_t n = mix ? mixCount(it, o.count) : o.count;
    const bool gather = coll == "AllGather", scatter = coll == "ReduceScatter";
    if (rank == o.hangRank && access(o.hangFile.c_str(), F_OK) == 0) {
      std::printf("HUNG rank=%d iter=%ld t=%.6f\n", rank, it, ctest::nowSeconds());
      std::fflush(stdout);
      while (true) pause();  // until the test's kill or the watchdog
    }
    const size_t sendCount = scatter ? n * size_t(nranks) : n;
    const size_t recvCount = gather ? n * size_t(nranks) : n;
    auto sumOf = [&](size_t k) {  // element k of every rank's input, summed
      int32_t s = 0;
      for (int q = 0; q < nranks; ++q) s += input(q, it, k);
      return s;
    };
    if (o.seconds > 0 && it % 10 == 0) {
      // Time's up when any rank's clock says so: the ranks agree (an AllReduce of the flag), so
      // that all make the same number of calls.
      int32_t stop = ctest::nowSeconds() - start >= o.seconds ? 1 : 0, any = 0;
      r = chorusAllReduce(&stop, &any, 1, chorusInt32, chorusMax, comm, nullptr);
      if (r == chorusSuccess && any != 0) break;
      if (r != chorusSuccess) goto failed;
    }
    for (size_t k = 0; k < sendCount; ++k) send[k] = input(rank, it, k);
    std::fill(recv.begin(), recv.begin() + long(recvCount), INT32_MIN);
    if (coll == "AllReduce") {
      r = chorusAllReduce(send.data(), recv.data(), n, chorusInt32, chorusSum, comm, nullptr);
      for (size_t k = 0; k < n; ++k) want[k] = sumOf(k);
    } else if (gather) {
      r = chorusAllGather(send.data(), recv.data(), n, chorusInt32, comm, nullptr);
      for (int q = 0; q < nranks; ++q)
        for (size_t k = 0; k < n; ++k) want[size_t(q) * n + k] = input(q, it, k);
    } else if (scatter) {
      r = chorusReduceScatter(send.data(), recv.data(), n, chorusInt32, chorusSum, comm, nullptr);
      for (size_t k = 0; k < n; ++k) want[k] = sumOf(size_t(rank) * n + k);
    } else if (coll == "Broadcast") {
      const int root = int(it % nranks);
      r = chorusBroadcast(send.data(), recv.data(), n, chorusInt32, root, comm, nullptr);
      for (size_t k = 0; k < n; ++k) want[k] = input(root, it, k);
    } else {
      r = chorusGroupStart();
      if (r == chorusSuccess)
        r = chorusSend(send.data(), n, chorusInt32, (rank + 1) % nranks, comm, nullptr);
      if (r == chorusSuccess)
        r = chorusRecv(recv.data(), n, chorusInt32, (rank + nranks - 1) % nranks, comm, nullptr);
      const chorusResult_t e = chorusGroupEnd();
      if (r == chorusSuccess) r = e;
      const int from = (rank + nranks - 1) % nranks;
      for (size_t k = 0; k < n; ++k) want[k] = input(from, it, k);
    }
    if (r != chorusSuccess) {
    failed:
      int culprit = -2;
      if (chorusCommGetFailedRank(comm, &culprit) != chorusSuccess) culprit = -3;
      std::string msg = chorusGetLastError(comm);
      for (char& ch : msg)
        if (ch == '\n') ch = ' ';
      std::printf("FAILED rank=%d code=%d name=%s t=%.6f iter=%ld culprit=%d msg=%s\n", rank,
                  int(r), ctest::resultName(r), ctest::nowSeconds(), it, culprit, msg.c_str());
      std::fflush(stdout);
      if (o.lingerMs > 0) usleep(useconds_t(o.lingerMs) * 1000);
      chorusCommAbort(comm);
      return 3;
    }
    for (size_t k = 0; k < recvCount; ++k)
      if (recv[k] != want[k]) {
        std::printf("WRONG rank=%d iter=%ld coll=%s count=%zu index=%zu got=%d want=%d\n", rank, it,
                    coll.c_str(), n, k, recv[k], want[k]);
        std::fflush(stdout);
        chorusCommAbort(comm);
        return 2;
      }
    if (it < 10 || (it + 1) % 10 == 0) {
      std::printf("PROGRESS rank=%d iter=%ld t=%.6f\n", rank, it, ctest::nowSeconds());
      std::fflush(stdout);
    }
  }
  const double secs = ctest::nowSeconds() - start;
  r = chorusCommDestroy(comm);
  if (r != chorusSuccess) {
    std::printf("FAILED rank=%d code=%d name=%s t=%.6f iter=%ld culprit=-1 msg=destroy: %s\n", rank,
                int(r), ctest::resultName(r), ctest::nowSeconds(), it, chorusGetLastError(nullptr));
    return 3;
  }
  std::printf("DONE rank=%d iters=%ld t=%.6f seconds=%.3f\n", rank, it, ctest::nowSeconds(), secs);
  return 0;
}
