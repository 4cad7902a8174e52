// chorus_reliability_worker: one rank of a failure test (tests/test_reliability.cc). The test
// starts the ranks itself (fork/exec with CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID and
// CHORUS_SECRET), not through chorusrun, because chorusrun ends the whole job when one rank dies
// and the point here is to watch what the survivors see.
//
//   chorus_reliability_worker --coll NAME [--count N] [--iters N] [--hang-rank R]
//                             [--linger | --exit-on-failure MODE] [--watchdog SEC]
//                             [--hold-rank R]
//
//   --coll NAME      AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather,
//                    Scatter or SendRecv (a group {Send to rank+1, Recv from rank-1})
//   --count N        elements (float32) per rank and call (default 262144 = 1 MiB)
//   --iters N        calls to make; 0 (default) = until one fails
//   --hang-rank R    rank R sleeps after init instead of calling (the others wait in the call)
//   --linger         after a failure, keep the process (and its failed communicator) alive
//                    until standard input reaches end of file, then destroy and exit: peers must
//                    learn of the failure from the communicator, not from this process's exit
//   --exit-on-failure MODE
//                    after a failure, report it and leave at once (exit status 1), as a job whose
//                    ranks end on their first error does: MODE exit (std::exit, no destroy),
//                    destroy (chorusCommDestroy, then exit) or abort (chorusCommAbort, then
//                    exit). Its peers must still name the rank that failed first, not this one.
//   --watchdog SEC   exit 99 if not finished by then (default 120)
//   --hold-rank R    rank R (CHORUS_RANK) reads one byte from standard input before it starts
//                    chorusCommInitFromEnv: the others wait in communicator creation (their data
//                    listeners open) until the test releases it
//
// Output (stdout, one line each, times are CLOCK_MONOTONIC seconds, shared by all processes):
//   READY rank=R nranks=N pid=P comm=HOST:PORT t=T   init done and the first call's result checked
//   FAILED rank=R code=C name=NAME async=NAME t=T iter=I culprit=F msg=MESSAGE
//                                   (F: chorusCommGetFailedRank)
//   DESTROY rank=R rc=NAME t=T
//   DONE rank=R iters=I                               every call succeeded
// Exit status: 0 DONE, 3 a call failed (reported), 1 a call failed with --exit-on-failure, 2 init
// or a result was wrong, 99 watchdog.
#include <chorus/chorus.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "result_name.h"
#include "timing.h"
#include "watchdog.h"

namespace {

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "chorus_reliability_worker: %s\n", msg.c_str());
  std::exit(2);
}

struct Options {
  std::string coll;
  size_t count = 262144;
  long iters = 0;
  int hangRank = -1;
  int holdRank = -1;
  bool linger = false;
  std::string exitMode;  // --exit-on-failure: "exit", "destroy" or "abort"
  double watchdog = 120;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--coll") {
      o.coll = next();
    } else if (a == "--count") {
      o.count = std::stoull(next());
    } else if (a == "--iters") {
      o.iters = std::stol(next());
    } else if (a == "--hang-rank") {
      o.hangRank = std::stoi(next());
    } else if (a == "--hold-rank") {
      o.holdRank = std::stoi(next());
    } else if (a == "--linger") {
      o.linger = true;
    } else if (a == "--exit-on-failure") {
      o.exitMode = next();
      if (o.exitMode != "exit" && o.exitMode != "destroy" && o.exitMode != "abort")
        usage("--exit-on-failure: MODE is exit, destroy or abort, not '" + o.exitMode + "'");
    } else if (a == "--watchdog") {
      o.watchdog = std::stod(next());
    } else {
      usage("unknown option " + a);
    }
  }
  static const char* kKnown[] = {"AllReduce", "Broadcast", "Reduce",  "AllGather", "ReduceScatter",
                                 "AlltoAll",  "Gather",    "Scatter", "SendRecv"};
  bool known = false;
  for (const char* k : kKnown) known = known || o.coll == k;
  if (!known) usage("--coll: unknown collective '" + o.coll + "'");
  return o;
}

// One call of the collective. Buffers are sized for the largest need (count * nranks).
chorusResult_t call(const Options& o, chorusComm_t comm, int rank, int nranks, const float* send,
                    float* recv) {
  const size_t n = o.count;
  const int root = 1 % nranks;
  if (o.coll == "AllReduce")
    return chorusAllReduce(send, recv, n, chorusFloat32, chorusSum, comm, nullptr);
  if (o.coll == "Broadcast")
    return chorusBroadcast(send, recv, n, chorusFloat32, root, comm, nullptr);
  if (o.coll == "Reduce")
    return chorusReduce(send, recv, n, chorusFloat32, chorusSum, root, comm, nullptr);
  if (o.coll == "AllGather") return chorusAllGather(send, recv, n, chorusFloat32, comm, nullptr);
  if (o.coll == "ReduceScatter")
    return chorusReduceScatter(send, recv, n, chorusFloat32, chorusSum, comm, nullptr);
  if (o.coll == "AlltoAll") return chorusAlltoAll(send, recv, n, chorusFloat32, comm, nullptr);
  if (o.coll == "Gather") return chorusGather(send, recv, n, chorusFloat32, root, comm, nullptr);
  if (o.coll == "Scatter") return chorusScatter(send, recv, n, chorusFloat32, root, comm, nullptr);
  // SendRecv: a ring shift.
  chorusResult_t r = chorusGroupStart();
  if (r != chorusSuccess) return r;
  chorusResult_t s = chorusSend(send, n, chorusFloat32, (rank + 1) % nranks, comm, nullptr);
  chorusResult_t v =
      chorusRecv(recv, n, chorusFloat32, (rank + nranks - 1) % nranks, comm, nullptr);
  r = chorusGroupEnd();
  return s != chorusSuccess ? s : v != chorusSuccess ? v : r;
}

// Checks one element of the first call's result (inputs: rank r holds r + 1 everywhere).
bool resultLooksRight(const Options& o, int rank, int nranks, const float* recv) {
  const int root = 1 % nranks;
  const float sum = float(nranks * (nranks + 1) / 2);
  if (o.coll == "AllReduce" || o.coll == "ReduceScatter") return recv[0] == sum;
  if (o.coll == "Reduce") return rank != root || recv[0] == sum;
  if (o.coll == "Broadcast") return recv[0] == float(root + 1);
  if (o.coll == "AllGather" || o.coll == "AlltoAll")
    return recv[o.count * size_t(nranks - 1)] == float(nranks);
  if (o.coll == "Gather")
    return rank != root || recv[o.count * size_t(nranks - 1)] == float(nranks);
  if (o.coll == "Scatter") return recv[0] == float(root + 1);
  return recv[0] == float((rank + nranks - 1) % nranks + 1);  // SendRecv
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ctest::Watchdog watchdog(o.watchdog, "chorus_reliability_worker");
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  if (o.holdRank >= 0) {
    const char* me = std::getenv("CHORUS_RANK");
    if (me != nullptr && std::atoi(me) == o.holdRank) {
      char c;
      if (read(STDIN_FILENO, &c, 1) != 1) return 2;
    }
  }
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
  std::vector<float> send(o.count * size_t(nranks), float(rank + 1));
  std::vector<float> recv(o.count * size_t(nranks), -1.0f);

  const char* commId = std::getenv("CHORUS_COMM_ID");
  auto ready = [&] {
    std::printf("READY rank=%d nranks=%d pid=%d comm=%s t=%.6f\n", rank, nranks, int(getpid()),
                commId ? commId : "-", ctest::nowSeconds());
  };
  if (rank == o.hangRank) {
    ready();
    for (;;) pause();  // until killed (or the watchdog)
  }

  long iter = 0;
  for (; o.iters == 0 || iter < o.iters; ++iter) {
    if (iter == 0 && o.hangRank >= 0) ready();
    r = call(o, comm, rank, nranks, send.data(), recv.data());
    if (r != chorusSuccess) break;
    if (iter == 0) {
      if (!resultLooksRight(o, rank, nranks, recv.data())) {
        std::printf("WRONG rank=%d coll=%s first element %g\n", rank, o.coll.c_str(),
                    double(recv[0]));
        return 2;
      }
      if (o.hangRank < 0) ready();
    }
  }
  if (r == chorusSuccess) {
    chorusResult_t d = chorusCommDestroy(comm);
    std::printf("DONE rank=%d iters=%ld destroy=%s\n", rank, iter, ctest::resultName(d));
    return d == chorusSuccess ? 0 : 2;
  }

  const double failedAt = ctest::nowSeconds();
  chorusResult_t async = chorusSuccess;
  if (chorusCommGetAsyncError(comm, &async) != chorusSuccess) async = chorusNumResults;
  std::string msg = chorusGetLastError(comm);
  for (char& c : msg)
    if (c == '\n') c = ' ';
  int culprit = -2;
  if (chorusCommGetFailedRank(comm, &culprit) != chorusSuccess) culprit = -3;
  std::printf("FAILED rank=%d code=%d name=%s async=%s t=%.6f iter=%ld culprit=%d msg=%s\n", rank,
              int(r), ctest::resultName(r), ctest::resultName(async), failedAt, iter, culprit,
              msg.c_str());
  if (o.exitMode == "exit") std::exit(1);
  if (o.exitMode == "destroy") {
    chorusCommDestroy(comm);
    std::exit(1);
  }
  if (o.exitMode == "abort") {
    chorusCommAbort(comm);
    std::exit(1);
  }
  if (o.linger) {
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
  }
  const chorusResult_t d = chorusCommDestroy(comm);
  std::printf("DESTROY rank=%d rc=%s t=%.6f\n", rank, ctest::resultName(d), ctest::nowSeconds());
  return 3;
}
