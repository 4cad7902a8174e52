// chorus_status_worker: a rank (or several, on threads) of the status report tests
// (tests/test_status.cc), started by chorusrun:
//
//   chorusrun -np P chorus_status_worker [--threads T] [--iters N] [--hang-rank R]
//                                        [--hang-seconds S] [--ready-file PATH]
//
// Each process runs T ranks on threads (ranks p*T .. p*T+T-1 of P*T), each with its own
// communicator. Every rank runs N AllReduces of 8 float32 (checked) first.
//   --hang-rank R   then rank R sleeps S seconds (default 6) instead of calling; the others call
//                   one more AllReduce, which must fail (CHORUS_TIMEOUT) after printing its status
//                   report. Exit 0 when every other rank's call failed and the error named a peer.
//   otherwise       the ranks keep calling AllReduce until every process has printed a status
//                   report for each of its communicators (the test sends chorusrun the status
//                   signal once PATH exists; rank 0 creates it after the first N calls), then
//                   exit 0.
// A watchdog exits 99 after --timeout SEC (default 120).
#include <chorus/chorus.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/status.h"

namespace {

struct Options {
  int threads = 1;
  int iters = 5;
  int hangRank = -1;
  double hangSeconds = 6;
  std::string readyFile;
  double timeout = 120;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "chorus_status_worker: %s\n", msg.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--iters") {
      o.iters = std::stoi(next());
    } else if (a == "--hang-rank") {
      o.hangRank = std::stoi(next());
    } else if (a == "--hang-seconds") {
      o.hangSeconds = std::stod(next());
    } else if (a == "--ready-file") {
      o.readyFile = next();
    } else if (a == "--timeout") {
      o.timeout = std::stod(next());
    } else {
      usage("unknown option " + a);
    }
  }
  return o;
}

std::atomic<int> gFailures{0};

void failure(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  gFailures.fetch_add(1);
}

// 8 float32 AllReduce (sum) of rank+i+iter; true when the result is exact.
bool allReduceOnce(chorusComm_t comm, int rank, int nranks, int iter, chorusResult_t* result,
                   float extra = 0, float* extraSum = nullptr) {
  float in[8], out[8];
  for (int i = 0; i < 8; ++i) in[i] = float(rank + i + iter);
  in[7] = extra;
  *result = chorusAllReduce(in, out, 8, chorusFloat32, chorusSum, comm, nullptr);
  if (*result != chorusSuccess) return false;
  for (int i = 0; i < 7; ++i) {
    const float want = float(nranks * (i + iter)) + float(nranks * (nranks - 1) / 2);
    if (out[i] != want) return false;
  }
  if (extraSum) *extraSum = out[7];
  return true;
}

void runRank(const Options& o, const chorusUniqueId& id, int rank, int nranks) {
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitRank(&comm, nranks, id, rank);
  if (r != chorusSuccess) return failure(rank, std::string("init: ") + chorusGetErrorString(r));
  for (int it = 0; it < o.iters; ++it)
    if (!allReduceOnce(comm, rank, nranks, it, &r))
      return failure(rank, "AllReduce " + std::to_string(it) + ": " + chorusGetLastError(comm));
  if (o.hangRank >= 0) {
    if (rank == o.hangRank) {
      usleep(useconds_t(o.hangSeconds * 1e6));
      chorusCommAbort(comm);
      return;
    }
    allReduceOnce(comm, rank, nranks, o.iters, &r);
    const std::string msg = chorusGetLastError(comm);
    std::fprintf(stderr, "rank %d: result %s: %s\n", rank, chorusGetErrorString(r), msg.c_str());
    if (r == chorusSuccess) failure(rank, "the call with a hung rank succeeded");
    if (msg.find("rank ") == std::string::npos) failure(rank, "the error names no rank: " + msg);
    chorusCommAbort(comm);
    return;
  }
  // On demand: loop until every rank of every process has seen its process print its reports.
  if (rank == 0 && !o.readyFile.empty()) {
    FILE* f = std::fopen(o.readyFile.c_str(), "w");
    if (f) std::fclose(f);
  }
  for (int it = o.iters;; ++it) {
    const bool printed = chorus::statusReportsPrinted() >= uint64_t(o.threads);
    float printedSum = 0;
    if (!allReduceOnce(comm, rank, nranks, it, &r, printed ? 1.f : 0.f, &printedSum))
      return failure(rank, "AllReduce " + std::to_string(it) + ": " + chorusGetLastError(comm));
    if (printedSum == float(nranks)) break;
    usleep(1000);
  }
  r = chorusCommDestroy(comm);
  if (r != chorusSuccess) failure(rank, std::string("destroy: ") + chorusGetErrorString(r));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::thread([t = o.timeout] {
    usleep(useconds_t(t * 1e6));
    std::fprintf(stderr, "chorus_status_worker: watchdog after %.0f s\n", t);
    std::_Exit(99);
  }).detach();
  chorusUniqueId id;
  int proc = 0, nprocs = 1;
  chorusResult_t r = chorusUniqueIdFromEnv(&id, &proc, &nprocs);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "chorusUniqueIdFromEnv: %s\n", chorusGetErrorString(r));
    return 1;
  }
  const int nranks = nprocs * o.threads;
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back(runRank, std::cref(o), std::cref(id), proc * o.threads + t, nranks);
  for (auto& t : threads) t.join();
  return gFailures.load() == 0 ? 0 : 1;
}
