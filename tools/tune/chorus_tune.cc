// chorus-tune: measures this machine's hand-off latency and slot bandwidth per protocol, fits the
// tuner's model (src/tune/tuner.h) and caches it; --print shows the model's predicted time for
// every size and choice, marking the one the tuner picks; --cluster predicts a described cluster
// (cluster_model.h) without measuring anything.
//
//   chorus-tune [--ranks N] [--no-save] [--print] [--print-only] [--collective allreduce]
//               [--fit-ranks N,M,..] [--runs K] [--threads] [--reference FILE] [--in-place-only]
//   chorus-tune --cluster NODESxRANKS [--link-gbps G] [--link-us U] [--mem-gbs B] [--hop-us H]
//               [--channels C] [--min-bytes S] [--max-bytes S] [--collective NAME|all] [--json F]
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "cluster_model.h"
#include "comm/comm.h"
#include "host_buffer.h"
#include "tune/calibration.h"
#include "tune/tuner.h"

using namespace chorus;

namespace {

// The overrides a communicator's init reads (CHORUS_ALGO, CHORUS_PROTO, the channel count).
void setOverrides(const std::string& algo, const std::string& proto, int nch) {
  setenv("CHORUS_ALGO", algo.c_str(), 1);
  setenv("CHORUS_PROTO", proto.c_str(), 1);
  setenv("CHORUS_MIN_NCHANNELS", std::to_string(nch).c_str(), 1);
  setenv("CHORUS_MAX_NCHANNELS", std::to_string(nch).c_str(), 1);
}

void clearOverrides() {
  for (const char* v :
       {"CHORUS_ALGO", "CHORUS_PROTO", "CHORUS_MIN_NCHANNELS", "CHORUS_MAX_NCHANNELS"})
    unsetenv(v);
}

// Median time (us) of `iters` AllReduces of `bytes` on n thread ranks with the given overrides.
double timeAllReduce(int n, size_t bytes, const char* algo, const char* proto, int nch, int iters) {
  setOverrides(algo, proto, nch);
  std::vector<chorusComm_t> comms(static_cast<size_t>(n));
  if (chorusCommInitAll(comms.data(), n, nullptr) != chorusSuccess) {
    fprintf(stderr, "chorus-tune: init failed: %s\n", chorusGetLastError(nullptr));
    exit(1);
  }
  const size_t count = std::max<size_t>(1, bytes / 4);
  std::vector<double> samples;
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      std::vector<float> a(count, 1.0f), b(count);
      for (int rep = 0; rep < 5; ++rep) {
        for (int w = 0; w < 2; ++w)
          chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[size_t(r)],
                          nullptr);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[size_t(r)],
                          nullptr);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    iters;
        if (r == 0) samples.push_back(us);
      }
    });
  for (auto& t : ts) t.join();
  for (auto c : comms) chorusCommDestroy(c);
  clearOverrides();
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// The sizes really timed for the asked model bytes (float32; a rank's count is at least 1).
size_t countFor(OpKind kind, size_t bytes, int n) {
  const bool perRank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
  return std::max<size_t>(1, bytes / 4 / (perRank ? size_t(n) : 1));
}

// The model bytes of the call that countFor makes of `bytes`: whole floats per rank.
double runBytes(OpKind kind, size_t bytes, int n) {
  const bool perRank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
  return double(countFor(kind, bytes, n) * 4 * (perRank ? size_t(n) : 1));
}

// One choice of a collective being timed: its overrides, the sizes it runs (model bytes, float32:
// whole elements per rank) and, on rank 0, each size's times over the rounds.
struct ChoiceRun {
  Algo algo;
  Proto proto;
  int channels;
  std::vector<double> bytes;
  std::vector<std::vector<double>> samples;
  bool registered = false;  // timed on registered buffers (needsRegisteredBuffers)
  // No overrides: the tuner's own pick, on the model set in this process (fitInPlace).
  bool tunerPick = false;
  bool inPlace = false;  // in place, as the benchmarks call it (rank_runner.cc's layouts)
};

// Forces a choice for this collective only (the barriers and the averaging of times keep the
// tuner's); read by the communicator's init.
void setChoiceEnv(OpKind kind, const ChoiceRun& c) {
  if (c.tunerPick) {
    clearOverrides();
    return;
  }
  const std::string key = std::string(collectiveKey(kind)) + ":";
  setOverrides(key + algoName(c.algo), key + protoName(c.proto), c.channels);
}

// The rounds of one rank's part of timeChoices (timeRank), on comms[c] for choice c (each
// initialised with its overrides): per size, 5 rounds, and in each round every choice that runs the
// size in turn: 2 warm-ups, a barrier (the choice's ranks start together), back-to-back calls (10
// to 2000; at the smallest sizes a round of 100 calls lasted about 12 us, where the skew of the
// ranks' start after the barrier was a part of the time), timed as the benchmarks time them: every
// rank's time per call, averaged over the ranks; into the choices' samples on rank 0 (`record`).
// The choices interleaved round by round: a burst of other work, or of this VM's changing speed,
// lasts seconds, and slows every choice's round of a size alike instead of one choice's whole
// sweep (timed one after the other, a choice measured in a fast second beat a faster one
// measured in a slow one: 2-rank AllGather's ring at 512 KiB 25 us against 50-86 us since).
// Ordinary choices run on (a0, b0), registered ones on regBase and regBase + most, in-place ones
// on b0 alone (this rank's block of it where one buffer holds every rank's). False where a call
// failed.
bool timeRounds(const std::vector<chorusComm_t>& comms, int n, int rank, OpKind kind,
                std::vector<ChoiceRun>* runs, bool record, float* a0, float* b0, float* regBase,
                size_t most) {
  size_t sizes = 0;
  for (const ChoiceRun& c : *runs) sizes = std::max(sizes, c.bytes.size());
  for (size_t i = 0; i < sizes; ++i)
    for (int rep = 0; rep < 5; ++rep)
      for (size_t c = 0; c < runs->size(); ++c) {
        ChoiceRun& run = (*runs)[c];
        if (i >= run.bytes.size()) continue;
        const chorusComm_t comm = comms[c];
        const size_t count = countFor(kind, size_t(run.bytes[i]), n);
        float* a = run.registered ? regBase : a0;
        float* b = run.registered ? regBase + most : b0;
        if (run.inPlace) {
          a = b = b0;
          if (kind == OpKind::kAllGather) a = b0 + count * size_t(rank);
          if (kind == OpKind::kReduceScatter) b = b0 + count * size_t(rank);
        }
        const int iters = int(std::clamp<double>(2e6 / (0.5e3 + double(count) * 4), 10, 2000));
        auto call = [&] {
          switch (kind) {
            case OpKind::kAllReduce:
              return chorusAllReduce(a, b, count, chorusFloat32, chorusSum, comm, nullptr);
            case OpKind::kBroadcast:
              return chorusBroadcast(a, b, count, chorusFloat32, 0, comm, nullptr);
            case OpKind::kReduce:
              return chorusReduce(a, b, count, chorusFloat32, chorusSum, 0, comm, nullptr);
            case OpKind::kAllGather:
              return chorusAllGather(a, b, count, chorusFloat32, comm, nullptr);
            default:
              return chorusReduceScatter(a, b, count, chorusFloat32, chorusSum, comm, nullptr);
          }
        };
        for (int w = 0; w < 2; ++w)
          if (call() != chorusSuccess) return false;
        int one = 1, all = 0;
        if (chorusAllReduce(&one, &all, 1, chorusInt32, chorusSum, comm, nullptr) != chorusSuccess)
          return false;
        auto t0 = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it)
          if (call() != chorusSuccess) return false;
        double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                       .count() /
                   iters;
        double sum = 0;
        if (chorusAllReduce(&t, &sum, 1, chorusFloat64, chorusSum, comm, nullptr) != chorusSuccess)
          return false;
        if (record) run.samples[i].push_back(sum / n);  // sized by timeChoices
      }
  return true;
}

// One rank's part of timeChoices: the buffers, then the rounds (timeRounds).
bool timeRank(const std::vector<chorusComm_t>& comms, int n, OpKind kind,
              std::vector<ChoiceRun>* runs, bool record) {
  // The benchmarks' own buffers (host_buffer.h: page-aligned), one pair for every size.
  size_t most = 1;
  for (const ChoiceRun& c : *runs)
    for (double b : c.bytes) most = std::max(most, countFor(kind, size_t(b), n) * size_t(n));
  const chorus_bench::Buffer sendBuf = chorus_bench::allocate(most * sizeof(float));
  const chorus_bench::Buffer recvBuf = chorus_bench::allocate(most * sizeof(float));
  float* const a = reinterpret_cast<float*>(sendBuf.get());
  float* const b = reinterpret_cast<float*>(recvBuf.get());
  std::fill_n(a, most, 1.0f);
  std::fill_n(b, most, 0.0f);
  // The registered choices' pair: one chorusMemAlloc region (the peers map it), registered with
  // each of their communicators (collective: every rank in the same order), as a user who
  // registers the buffers of the calls.
  float* regBase = nullptr;
  std::vector<std::pair<chorusComm_t, void*>> regs;
  auto dropRegistered = [&] {
    bool fine = true;
    for (auto& [comm, handle] : regs)
      fine = chorusCommDeregister(comm, handle) == chorusSuccess && fine;
    regs.clear();
    if (regBase != nullptr) fine = chorusMemFree(regBase) == chorusSuccess && fine;
    regBase = nullptr;
    return fine;
  };
  const size_t regBytes = 2 * most * sizeof(float);
  for (size_t c = 0; c < runs->size(); ++c) {
    if (!(*runs)[c].registered) continue;
    if (regBase == nullptr) {
      void* p = nullptr;
      if (chorusMemAlloc(&p, regBytes) != chorusSuccess) return false;
      regBase = static_cast<float*>(p);
      std::fill_n(regBase, most, 1.0f);
      std::fill_n(regBase + most, most, 0.0f);
    }
    void* handle = nullptr;
    if (chorusCommRegister(comms[c], regBase, regBytes, &handle) != chorusSuccess) {
      dropRegistered();
      return false;
    }
    regs.emplace_back(comms[c], handle);
  }
  int rank = 0;
  if (comms.empty() || chorusCommUserRank(comms[0], &rank) != chorusSuccess) {
    dropRegistered();
    return false;
  }
  const bool ok = timeRounds(comms, n, rank, kind, runs, record, a, b, regBase, most);
  return dropRegistered() && ok;
}

// One rank's communicators, one per choice, each initialised with the choice's overrides (every
// rank in the same order); false (and none kept) where an init failed.
bool initChoiceComms(OpKind kind, const std::vector<ChoiceRun>& runs, int n, int rank,
                     const std::vector<chorusUniqueId>& ids, std::vector<chorusComm_t>* comms) {
  for (size_t c = 0; c < runs.size(); ++c) {
    setChoiceEnv(kind, runs[c]);
    chorusComm_t comm = nullptr;
    const bool ok = chorusCommInitRank(&comm, n, ids[c], rank) == chorusSuccess;
    clearOverrides();
    if (!ok) {
      for (chorusComm_t k : *comms) chorusCommDestroy(k);
      comms->clear();
      return false;
    }
    comms->push_back(comm);
  }
  return true;
}

// As chorusrun places rank `index` of n: on the index-th core it may run on where every rank has
// a core, else unpinned (the scheduler spreads more ranks than cores).
void pinTo(int index, int n) {
  cpu_set_t avail, set;
  if (sched_getaffinity(0, sizeof(avail), &avail) != 0) return;
  const int cores = CPU_COUNT(&avail);
  if (n > cores) return;
  for (int c = 0, seen = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &avail) && seen++ == index % cores) {
      CPU_ZERO(&set);
      CPU_SET(c, &set);
      sched_setaffinity(0, sizeof(set), &set);  // best effort
      return;
    }
}

// The times (us, median of the 5 rounds) of every choice in `runs` of one `kind` at each of its
// sizes (model bytes, float32; replaced by the sizes really timed) on n ranks of one node,
// interleaved (timeRank): processes as the benchmarks and users run them (rank 0 here, the others
// forked, each pinned to a core as chorusrun pins where there are enough), or threads of this
// process (--threads). Into each run's `us`.
void timeChoices(int n, bool threads, OpKind kind, std::vector<ChoiceRun>* runs,
                 std::vector<std::vector<double>>* us) {
  for (ChoiceRun& c : *runs) {
    for (double& b : c.bytes) b = runBytes(kind, size_t(b), n);
    c.samples.assign(c.bytes.size(), {});
  }
  auto fail = [&](const char* what) {
    fprintf(stderr, "chorus-tune: %s on %d ranks: %s: %s\n", collectiveKey(kind), n, what,
            chorusGetLastError(nullptr));
    exit(1);
  };
  const size_t nc = runs->size();
  if (threads) {
    // comms[c][r]: choice c's communicator of rank r.
    std::vector<std::vector<chorusComm_t>> comms(nc, std::vector<chorusComm_t>(size_t(n)));
    for (size_t c = 0; c < nc; ++c) {
      setChoiceEnv(kind, (*runs)[c]);
      const bool ok = chorusCommInitAll(comms[c].data(), n, nullptr) == chorusSuccess;
      clearOverrides();
      if (!ok) fail("init");
    }
    std::vector<std::thread> ts;
    std::vector<char> ok(size_t(n), 0);
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        std::vector<chorusComm_t> mine;
        for (size_t c = 0; c < nc; ++c) mine.push_back(comms[c][size_t(r)]);
        ok[size_t(r)] = timeRank(mine, n, kind, runs, r == 0);
      });
    for (auto& t : ts) t.join();
    for (auto& per : comms)
      for (auto c : per) chorusCommDestroy(c);
    if (std::count(ok.begin(), ok.end(), 0) > 0) fail("a call failed");
  } else {
    // The others are forked before the communicators' ids exist (this process then holds no
    // thread of the library), and read the ids from a pipe.
    cpu_set_t mine;
    const bool haveMask = sched_getaffinity(0, sizeof(mine), &mine) == 0;
    std::vector<pid_t> kids;
    std::vector<int> pipes;
    fflush(stdout);
    for (int r = 1; r < n; ++r) {
      int fds[2];
      if (pipe(fds) != 0) fail("pipe");
      const pid_t pid = fork();
      if (pid < 0) fail("fork");
      if (pid == 0) {
        close(fds[1]);
        for (int fd : pipes) close(fd);
        std::vector<chorusUniqueId> ids(nc);
        const size_t want = nc * sizeof(chorusUniqueId);
        size_t got = 0;
        while (got < want) {
          const ssize_t k = read(fds[0], reinterpret_cast<char*>(ids.data()) + got, want - got);
          if (k <= 0) _exit(3);
          got += size_t(k);
        }
        pinTo(r, n);
        std::vector<chorusComm_t> comms;
        if (!initChoiceComms(kind, *runs, n, r, ids, &comms)) _exit(4);
        const bool ok = timeRank(comms, n, kind, runs, false);
        for (chorusComm_t c : comms) chorusCommDestroy(c);
        _exit(ok ? 0 : 5);
      }
      close(fds[0]);
      pipes.push_back(fds[1]);
      kids.push_back(pid);
    }
    std::vector<chorusUniqueId> ids(nc);
    for (chorusUniqueId& id : ids)
      if (chorusGetUniqueId(&id) != chorusSuccess) fail("chorusGetUniqueId");
    const ssize_t idBytes = ssize_t(nc * sizeof(chorusUniqueId));
    for (int fd : pipes) {
      if (write(fd, ids.data(), size_t(idBytes)) != idBytes) fail("write");
      close(fd);
    }
    pinTo(0, n);
    std::vector<chorusComm_t> comms;
    const bool inited = initChoiceComms(kind, *runs, n, 0, ids, &comms);
    const bool ok = inited && timeRank(comms, n, kind, runs, true);
    for (chorusComm_t c : comms) chorusCommDestroy(c);
    if (haveMask) sched_setaffinity(0, sizeof(mine), &mine);
    bool kidsOk = true;
    for (pid_t pid : kids) {
      int status = 0;
      if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        kidsOk = false;
    }
    if (!ok || !kidsOk) fail(inited ? "a rank failed" : "init");
  }
  us->assign(nc, {});
  for (size_t c = 0; c < nc; ++c) {
    ChoiceRun& run = (*runs)[c];
    for (auto& v : run.samples) {
      std::sort(v.begin(), v.end());
      (*us)[c].push_back(v.empty() ? 0.0 : v[v.size() / 2]);
    }
  }
}

// The cores this process may run on (its affinity mask), or 0 where it cannot tell.
int availableCores() {
  cpu_set_t avail;
  return sched_getaffinity(0, sizeof(avail), &avail) == 0 ? CPU_COUNT(&avail) : 0;
}

// The fit's sizes (kFitKnotBytes, model bytes) of `kind` on n ranks as they run (whole elements
// per rank), each once (8 B and 32 B of an AllGather on 8 ranks are both one float per rank), up
// to `limit` (a choice's slotLimit: then `limit` itself is the last).
std::vector<double> runSizes(OpKind kind, int n, size_t limit) {
  std::vector<double> sizes;
  auto add = [&](size_t b) {
    if (sizes.empty() || runBytes(kind, b, n) > sizes.back()) sizes.push_back(runBytes(kind, b, n));
  };
  for (size_t b : kFitKnotBytes) {
    if (b > limit) {
      if (sizes.empty() || sizes.back() < double(limit)) add(limit);
      break;
    }
    add(b);
  }
  return sizes;
}

// Times every choice the tuner may pick on n ranks of one node (fittable) at the fit's sizes,
// a collective's choices interleaved (timeChoices); of the collective `onlyKind` and the
// algorithm `onlyAlgo` alone where they are not -1.
void fitChoices(int n, int set, bool threads, MachineModel* m, bool verbose, int onlyKind,
                int onlyAlgo) {
  const int cores = availableCores();
  for (int k = 0; k < kFitKinds; ++k) {
    if (onlyKind >= 0 && k != onlyKind) continue;
    const OpKind kind = OpKind(k);
    std::vector<ChoiceRun> runs;
    for (int a = 0; a < numAlgos(); ++a)
      for (int p = 0; p < kNumProtos; ++p)
        for (int ch = 1; ch <= kCalibratedChannels; ++ch) {
          if (!fittable(kind, Algo(a), Proto(p), ch, n) || (onlyAlgo >= 0 && a != onlyAlgo))
            continue;
          runs.push_back(ChoiceRun{Algo(a),
                                   Proto(p),
                                   ch,
                                   runSizes(kind, n, slotLimit(Algo(a), kind, n)),
                                   {},
                                   needsRegisteredBuffers(kind, Algo(a), n)});
        }
    if (runs.empty()) continue;
    std::vector<std::vector<double>> us;
    timeChoices(n, threads, kind, &runs, &us);
    for (size_t c = 0; c < runs.size(); ++c) {
      const ChoiceRun& run = runs[c];
      ChoiceFit fit{};
      fit.nknots = int(std::min<size_t>(run.bytes.size(), kFitKnots));
      if (verbose)
        printf("%-13s %-8s %-6s %d ch:", collectiveKey(kind), algoName(run.algo),
               protoName(run.proto), run.channels);
      for (int i = 0; i < fit.nknots; ++i) {
        fit.bytes[i] = run.bytes[size_t(i)];
        fit.us[i] = us[c][size_t(i)];
        if (verbose)
          printf(" %.0f B %.2f us%s", fit.bytes[i], fit.us[i], i + 1 < fit.nknots ? "," : "");
      }
      if (verbose) printf("\n");
      fflush(stdout);
      fit.nranks = n;
      fit.cores = cores;
      fit.measured = true;
      m->fits[set][k][int(run.algo)][int(run.proto)][run.channels - 1] = fit;
    }
  }
}

// The in-place ratios (MachineModel::inPlace) of every fitted collective (of `onlyKind` alone
// where it is not -1) on n ranks of one node, into set `set`: the tuner's own pick (communicators
// without overrides, on the model this process set: forked ranks inherit it) at each of the fit's
// sizes, out of place and in place interleaved round by round (timeChoices), so that a burst of
// the VM's changing speed slows both alike; per pass the in-place median over the out-of-place
// one, and the median of `passes` passes (one pass of 5 rounds moves a small call's ratio by
// 10-25%: 0.04 us of 0.17).
void fitInPlace(int n, int set, bool threads, MachineModel* m, bool verbose, int onlyKind,
                int passes) {
  const int cores = availableCores();
  for (int k = 0; k < kFitKinds; ++k) {
    if (onlyKind >= 0 && k != onlyKind) continue;
    const OpKind kind = OpKind(k);
    const std::vector<double> sizes = runSizes(kind, n, SIZE_MAX);
    const size_t knots = std::min<size_t>(sizes.size(), kFitKnots);
    std::vector<std::vector<double>> ratios(knots);
    for (int pass = 0; pass < passes; ++pass) {
      ChoiceRun out{Algo::kRing, Proto::kSimple, 1, sizes, {}};
      out.tunerPick = true;
      ChoiceRun in = out;
      in.inPlace = true;
      std::vector<ChoiceRun> runs{out, in};
      std::vector<std::vector<double>> us;
      timeChoices(n, threads, kind, &runs, &us);
      for (size_t i = 0; i < knots; ++i) {
        const double o = us[0][i], p = us[1][i];
        ratios[i].push_back(o > 0 && p > 0 ? p / o : 1.0);
      }
    }
    InPlaceFit fit{};
    fit.nknots = int(knots);
    if (verbose) printf("%-13s in place / out of place:", collectiveKey(kind));
    for (size_t i = 0; i < knots; ++i) {
      std::sort(ratios[i].begin(), ratios[i].end());
      fit.bytes[i] = sizes[i];
      fit.ratio[i] = ratios[i][ratios[i].size() / 2];
      if (verbose) printf(" %.0f B %.2f%s", fit.bytes[i], fit.ratio[i], i + 1 < knots ? "," : "");
    }
    if (verbose) printf("\n");
    fflush(stdout);
    fit.nranks = n;
    fit.cores = cores;
    fit.measured = true;
    m->inPlace[set][k] = fit;
  }
}

// The fits as reference_fits.inc's rows (src/tune/calibration.cc: the built-in model).
// `note`: a comment line on what this run re-timed (--collective), or empty.
bool writeReference(const MachineModel& m, const char* path, const std::string& note) {
  FILE* f = fopen(path, "w");
  if (f == nullptr) return false;
  fprintf(f,
          "// Generated by `chorus-tune --reference %s` on the 2-core reference VM (quiet);\n"
          "// {collective, algorithm, protocol, channels, ranks, cores, sizes, {bytes}, {us}};\n"
          "// algorithm \"%s\": {bytes} and {in-place time / out-of-place time} of the tuner's "
          "pick.\n",
          path, kInPlaceRow);
  if (!note.empty()) fprintf(f, "// %s\n", note.c_str());
  forEachFit(m, [&](FitIndex at, const ChoiceFit& fit) {
    fprintf(f, "{\"%s\", \"%s\", \"%s\", %d, %d, %d, %d,\n {", collectiveKey(at.kind),
            algoName(at.algo), protoName(at.proto), at.channels, fit.nranks, fit.cores, fit.nknots);
    for (int i = 0; i < fit.nknots; ++i) fprintf(f, "%s%.0f", i ? ", " : "", fit.bytes[i]);
    fprintf(f, "},\n {");
    for (int i = 0; i < fit.nknots; ++i) fprintf(f, "%s%.4g", i ? ", " : "", fit.us[i]);
    fprintf(f, "}},\n");
  });
  for (int set = 0; set < kFitSets; ++set)
    for (int k = 0; k < kFitKinds; ++k) {
      const InPlaceFit& fit = m.inPlace[set][k];
      if (!fit.measured) continue;
      fprintf(f, "{\"%s\", \"%s\", \"-\", 0, %d, %d, %d,\n {", collectiveKey(OpKind(k)),
              kInPlaceRow, fit.nranks, fit.cores, fit.nknots);
      for (int i = 0; i < fit.nknots; ++i) fprintf(f, "%s%.0f", i ? ", " : "", fit.bytes[i]);
      fprintf(f, "},\n {");
      for (int i = 0; i < fit.nknots; ++i) fprintf(f, "%s%.3f", i ? ", " : "", fit.ratio[i]);
      fprintf(f, "}},\n");
    }
  return fclose(f) == 0;
}

// n processes on this machine as a communicator of them sees itself (core/placement.cc): the
// online cores, more ranks than cores or not (which set of fits applies), the CPUs a rank's
// channels may use.
Shape localShape(int n) {
  Shape s{n, 1, true};
  const int cores = std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
  s.onlineCores = cores;
  s.oversubscribed = n > cores;
  s.channelCpus = std::max(1, cores / std::max(1, n));
  return s;
}

void printTable(const char* collective, int n) {
  const int named = fitKindByName(collective);
  const OpKind kind = named < 0 ? OpKind::kAllReduce : OpKind(named);
  const MachineModel& m = machineModel();
  const Shape shape = localShape(n);
  printf(
      "# model (%s%s): simple hop %.2f us base %.2f us bw %.2f GB/s; ll hop %.2f us base %.2f "
      "us bw %.2f GB/s; channel gain %.2f wake %.1f us\n",
      m.calibrated ? "calibrated" : "built-in defaults, fits of ",
      m.calibrated ? "" : m.builtInFits, m.hopUs[0], m.baseUs[0], m.bwGBs[0], m.hopUs[1],
      m.baseUs[1], m.bwGBs[1], m.channelGain, m.channelWakeUs);
  printf("# predicted time (us) of %s on %d ranks; * marks the tuner's choice\n", collective, n);
  struct Col {
    Algo a;
    Proto p;
    int ch;
  };
  std::vector<Col> cols;
  for (int ai = 0; ai < numAlgos(); ++ai)
    for (int pi = 0; pi < kNumProtos; ++pi)
      for (int ch = 1; ch <= 2; ++ch) {
        Algo a = Algo(ai);
        Proto p = Proto(pi);
        if (!algoSupports(a, kind, shape) || !protoSupports(a, p)) continue;
        if (ch > 1 && !algoDesc(a).channels) continue;
        cols.push_back({a, p, ch});
      }
  const TunerEnv env = readTunerEnv();
  printf("%12s", "bytes");
  for (auto& c : cols) {
    char name[32];
    snprintf(name, sizeof(name), "%s/%s/%d", algoName(c.a), protoName(c.p), c.ch);
    printf(" %15s", name);
  }
  printf("\n");
  for (size_t bytes = 8; bytes <= (size_t(256) << 20); bytes *= 4) {
    printf("%12zu", bytes);
    // The tuner's own choice (its overrides, the sizes and fits each algorithm is picked at).
    const Choice pick = chooseForShape(shape, 2, kind, bytes, env);
    for (size_t i = 0; i < cols.size(); ++i)
      printf(" %14.1f%s", predictUs(kind, cols[i].a, cols[i].p, cols[i].ch, shape, bytes),
             cols[i].a == pick.algo && cols[i].p == pick.proto && cols[i].ch == pick.nchannels
                 ? "*"
                 : " ");
    printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  bool save = true, print = false, measure = true;
  std::string collective = "allreduce", algo;
  bool cluster = false, collectiveSet = false;
  ClusterSpec spec;
  std::string json, reference;
  int runs = 1;
  bool threads = false, inPlaceOnly = false;
  std::vector<int> fitRanks;
  auto positive = [](const char* flag, const char* v) {
    char* end = nullptr;
    const double d = strtod(v, &end);
    if (end == v || *end != 0 || !(d > 0)) {
      fprintf(stderr, "chorus-tune: %s needs a positive number, got '%s'\n", flag, v);
      exit(2);
    }
    return d;
  };
  static option opts[] = {{"ranks", required_argument, nullptr, 'n'},
                          {"cluster", required_argument, nullptr, 'C'},
                          {"link-gbps", required_argument, nullptr, 'G'},
                          {"link-us", required_argument, nullptr, 'L'},
                          {"mem-gbs", required_argument, nullptr, 'M'},
                          {"hop-us", required_argument, nullptr, 'H'},
                          {"channels", required_argument, nullptr, 'K'},
                          {"min-bytes", required_argument, nullptr, 'b'},
                          {"max-bytes", required_argument, nullptr, 'e'},
                          {"json", required_argument, nullptr, 'j'},
                          {"reference", required_argument, nullptr, 'R'},
                          {"runs", required_argument, nullptr, 'r'},
                          {"threads", no_argument, nullptr, 't'},
                          {"in-place-only", no_argument, nullptr, 'I'},
                          {"fit-ranks", required_argument, nullptr, 'F'},
                          {"no-save", no_argument, nullptr, 's'},
                          {"print", no_argument, nullptr, 'p'},
                          {"print-only", no_argument, nullptr, 'P'},
                          {"collective", required_argument, nullptr, 'c'},
                          {"algo", required_argument, nullptr, 'a'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "n:spPc:a:hC:G:L:M:H:K:b:e:j:R:r:tIF:", opts, nullptr)) !=
         -1) {
    switch (c) {
      case 'n':
        n = atoi(optarg);
        break;
      case 's':
        save = false;
        break;
      case 'p':
        print = true;
        break;
      case 'P':
        print = true, measure = false;
        break;
      case 'c':
        collective = optarg;
        collectiveSet = true;
        break;
      case 'a':
        algo = optarg;
        break;
      case 'C':
        if (!parseClusterShape(optarg, &spec.nodes, &spec.perNode)) {
          fprintf(stderr, "chorus-tune: --cluster wants NODESxRANKS (e.g. 16x8), got '%s'\n",
                  optarg);
          return 2;
        }
        cluster = true;
        break;
      case 'G':
        spec.linkGbps = positive("--link-gbps", optarg);
        break;
      case 'L':
        spec.linkUs = positive("--link-us", optarg);
        break;
      case 'M':
        spec.memGBs = positive("--mem-gbs", optarg);
        break;
      case 'H':
        spec.hopUs = positive("--hop-us", optarg);
        break;
      case 'K':
        spec.channels = std::clamp(int(positive("--channels", optarg)), 2, 64);
        break;
      case 'b':
        spec.minBytes = size_t(positive("--min-bytes", optarg));
        break;
      case 'e':
        spec.maxBytes = size_t(positive("--max-bytes", optarg));
        break;
      case 'j':
        json = optarg;
        break;
      case 'R':
        reference = optarg;
        break;
      case 'r':
        runs = int(positive("--runs", optarg));
        break;
      case 't':
        threads = true;
        break;
      case 'I':
        inPlaceOnly = true;
        break;
      case 'F': {
        fitRanks.clear();
        std::string list = optarg;
        for (size_t at = 0; at <= list.size();) {
          const size_t comma = std::min(list.find(',', at), list.size());
          const int v = int(positive("--fit-ranks", list.substr(at, comma - at).c_str()));
          if (v < 2 || fitRanks.size() == size_t(kFitSets)) {
            fprintf(stderr, "chorus-tune: --fit-ranks wants 1 to %d rank counts of 2 or more\n",
                    kFitSets);
            return 2;
          }
          fitRanks.push_back(v);
          at = comma + 1;
        }
        break;
      }
      default:
        printf(
            "usage: chorus-tune [--ranks N] [--no-save] [--print] [--print-only] "
            "[--collective allreduce|broadcast|reduce|allgather|reducescatter]\n"
            "                   [--algo NAME] [--fit-ranks N,M,..] [--runs K] [--threads]\n"
            "                   [--reference FILE] [--in-place-only]\n"
            "       chorus-tune --cluster NODESxRANKS [--link-gbps G] [--link-us U] [--mem-gbs B]\n"
            "                   [--hop-us H] [--channels C] [--min-bytes S] [--max-bytes S]\n"
            "                   [--collective NAME|all] [--json FILE]\n"
            "Measures hand-off latency and bandwidth per protocol on N thread ranks (default 2),\n"
            "times every choice the tuner may pick there (collective, algorithm, protocol,\n"
            "channels) at 8 B-32 MiB on processes (--threads: threads of one process), on 2\n"
            "ranks, twice the cores up to 8 and four times up to 16 (--fit-ranks: up to 3\n"
            "counts of your own),\n"
            "writes the tuner cache (%s), and with --print\n"
            "shows the model's predictions; --runs K times them K times and keeps each least;\n"
            "--reference also writes the fits as the built-in\n"
            "model's source (src/tune/reference_fits.inc). --collective NAME times that\n"
            "collective's choices alone and keeps the other fits (the cache's; with\n"
            "--reference the built-in model's); --algo NAME likewise that algorithm's\n"
            "(zerocopy: on registered chorusMemAlloc buffers, as it runs).\n"
            "Every run also times the tuner's pick of each collective in place against out of\n"
            "place (the in-place ratios that scale an in-place call's predicted time; with\n"
            "--runs K the median of K passes; --collective: that collective's; --algo alone:\n"
            "none);\n"
            "--in-place-only times those alone and keeps every fit (as --collective does).\n"
            "--cluster measures nothing: it prints, for the described cluster (default link\n"
            "25 Gbit/s; the rest from this machine's model unless given), the tuner's choice,\n"
            "predicted time and bus bandwidth of each collective per size, and the ideal.\n",
            tuneCachePath().c_str());
        return c == 'h' ? 0 : 2;
    }
  }
  if (cluster) {
    if (spec.minBytes > spec.maxBytes) {
      fprintf(stderr, "chorus-tune: --min-bytes %zu is above --max-bytes %zu\n", spec.minBytes,
              spec.maxBytes);
      return 2;
    }
    setMachineModel(*clusterModel(machineModel(), spec));
    const auto rows = predictCluster(spec, collectiveSet ? collective.c_str() : "all");
    if (rows.empty()) {
      fprintf(stderr, "chorus-tune: unknown collective '%s'\n", collective.c_str());
      return 2;
    }
    printCluster(spec, rows);
    if (!json.empty()) {
      FILE* f = fopen(json.c_str(), "w");
      if (f == nullptr) {
        fprintf(stderr, "chorus-tune: cannot write %s: %s\n", json.c_str(), strerror(errno));
        return 1;
      }
      writeClusterJson(f, spec, rows);
      fclose(f);
    }
    return 0;
  }
  if (n < 2) n = 2;
  if (fitRanks.empty()) {  // 2 ranks, twice the cores (at most 8), four times (at most 16)
    const int cores = std::max(1, availableCores());
    fitRanks.push_back(2);
    for (const int v : {std::min(8, 2 * cores), std::min(16, 4 * cores)})
      if (v > fitRanks.back() && fitRanks.size() < size_t(kFitSets)) fitRanks.push_back(v);
  }
  if (measure) {
    // --collective: re-time that collective's choices alone, keep the rest of the model.
    const int onlyKind = collectiveSet ? fitKindByName(collective.c_str()) : -1;
    if (collectiveSet && onlyKind < 0) {
      fprintf(stderr, "chorus-tune: unknown collective '%s'\n", collective.c_str());
      return 2;
    }
    const int onlyAlgo = algo.empty() ? -1 : algoByName(algo.c_str());
    if (!algo.empty() && onlyAlgo < 0) {
      fprintf(stderr, "chorus-tune: unknown algorithm '%s'\n", algo.c_str());
      return 2;
    }
    const bool partial = onlyKind >= 0 || onlyAlgo >= 0 || inPlaceOnly;
    // The fits kept with --collective: the cache's, or with --reference the built-in model's.
    std::unique_ptr<MachineModel> model =
        partial && reference.empty() ? loadOrDefaultModel() : defaultModel();
    MachineModel& m = *model;
    const double hops = 2.0 * (n - 1), share = 2.0 * (n - 1) / n;
    double base = m.baseUs[0];
    for (int pi = 0; pi < kNumProtos && !inPlaceOnly; ++pi) {
      if (pi == 0) base = timeAllReduce(1, 8, "ring", "simple", 1, 20000);
      const char* proto = protoName(Proto(pi));
      size_t big = pi == 0 ? (size_t(16) << 20) : (size_t(1) << 20);
      double tSmall = timeAllReduce(n, 8, "ring", proto, 1, 5000);
      double tBig = timeAllReduce(n, big, "ring", proto, 1, pi == 0 ? 10 : 50);
      m.baseUs[pi] = base;
      m.hopUs[pi] = std::max(0.01, (tSmall - base) / hops);
      m.bwGBs[pi] = double(big) * share / std::max(1.0, tBig - tSmall) / 1e3;
      printf("%-6s: 8 B %.2f us, %zu B %.1f us -> hop %.3f us, bandwidth %.2f GB/s\n", proto,
             tSmall, big, tBig, m.hopUs[pi], m.bwGBs[pi]);
    }
    if (!inPlaceOnly) {
      double t1 = timeAllReduce(n, size_t(16) << 20, "ring", "simple", 1, 10);
      double t2 = timeAllReduce(n, size_t(16) << 20, "ring", "simple", 2, 10);
      double s1 = timeAllReduce(n, 8192, "ring", "simple", 1, 2000);
      double s2 = timeAllReduce(n, 8192, "ring", "simple", 2, 2000);
      m.channelGain = std::max(0.0, t1 / t2 - 1.0);
      m.channelWakeUs = std::max(0.0, s2 - s1);
      printf("channels: 16 MiB 1 ch %.1f us, 2 ch %.1f us -> gain %.2f; 8 KiB overhead %.1f us\n",
             t1, t2, m.channelGain, m.channelWakeUs);
    }
    // Every choice the tuner may pick here, timed at the fit's sizes; with --runs K, K sweeps
    // one after the other and each time the least of the K. This VM runs in two states for
    // minutes at a time, the whole machine alike (2 ranks, 2026-12-03: AllReduce's ring of 8 MiB
    // 800 us in one, 1890 in the other, the 8 B hand-off 0.21 against 0.5 us, Open MPI's too),
    // and they rank the choices differently (the ring first in the fast one, the single copy
    // 6% ahead of it in the slow one, 1.7x behind in the fast one): the least is the fast
    // state wherever one sweep saw it, which the benchmarks' best times report too.
    // Only what runs now: each rank count in a set of its own. With --collective, each in the
    // set that holds that rank count's fits already (or a free one), only that collective's fits
    // there dropped, and every other fit as it was.
    std::vector<int> sets(fitRanks.size());
    for (size_t i = 0; i < fitRanks.size(); ++i) {
      sets[i] = !partial ? int(i) : fitSetFor(m, fitRanks[i]);
      if (sets[i] < 0) {
        fprintf(stderr,
                "chorus-tune: every fit set holds another rank count than %d (a run without "
                "--collective or --algo replaces them)\n",
                fitRanks[i]);
        return 2;
      }
    }
    forEachFit(m, [&](FitIndex at, ChoiceFit& f) {
      if (inPlaceOnly) return;  // every fit kept
      if (!partial || ((onlyKind < 0 || int(at.kind) == onlyKind) &&
                       (onlyAlgo < 0 || int(at.algo) == onlyAlgo) &&
                       std::find(sets.begin(), sets.end(), at.set) != sets.end()))
        f.measured = false;
    });
    // On the heap: a model holds every fit (about 225 KiB).
    std::vector<std::unique_ptr<MachineModel>> sweeps;
    for (int r = 0; r < std::max(1, runs) && !inPlaceOnly; ++r)
      sweeps.push_back(std::make_unique<MachineModel>(m));
    for (size_t r = 0; r < sweeps.size(); ++r)
      for (size_t set = 0; set < fitRanks.size(); ++set) {
        printf("# sweep %zu of %zu, %d ranks\n", r + 1, sweeps.size(), fitRanks[set]);
        fitChoices(fitRanks[set], sets[set], threads, sweeps[r].get(), true, onlyKind, onlyAlgo);
      }
    if (!sweeps.empty())
      forEachFit(*sweeps[0], [&](FitIndex at, const ChoiceFit& first) {
        auto slot = [&](MachineModel& s) -> ChoiceFit& {
          return s.fits[at.set][int(at.kind)][int(at.algo)][int(at.proto)][at.channels - 1];
        };
        ChoiceFit fit = first;
        for (int i = 0; i < fit.nknots; ++i) {
          std::vector<double> v;
          for (const auto& s : sweeps) v.push_back(slot(*s).us[i]);
          std::sort(v.begin(), v.end());
          fit.us[i] = v.front();
        }
        makeMonotone(&fit);
        slot(m) = fit;
      });
    // The in-place ratios of the tuner's picks on the model just fitted (the forked ranks
    // inherit it): every collective's, or the one --collective names; --algo alone keeps them.
    setMachineModel(m);
    for (size_t set = 0; set < fitRanks.size() && (inPlaceOnly || onlyAlgo < 0 || onlyKind >= 0);
         ++set) {
      printf("# in place, %d ranks\n", fitRanks[set]);
      fitInPlace(fitRanks[set], sets[set], threads, &m, true, onlyKind, std::max(1, runs));
    }
    printf("base (1 rank, 8 B): %.3f us\n", base);
    m.calibrated = true;
    setMachineModel(m);
    if (save) {
      std::string err;
      if (!saveModel(m, &err)) {
        fprintf(stderr, "chorus-tune: %s\n", err.c_str());
        return 1;
      }
      printf("saved %s\n", tuneCachePath().c_str());
    }
    if (!reference.empty()) {
      std::string note;
      if (partial) {
        // What was re-timed, and the flags that asked for it.
        std::string what = onlyKind >= 0 ? collective : "";
        std::string flags = onlyKind >= 0 ? "--collective " + collective : "";
        if (inPlaceOnly) {
          what += (what.empty() ? "" : " ") + std::string("the in-place ratios");
          flags += (flags.empty() ? "" : " ") + std::string("--in-place-only");
        }
        if (onlyAlgo >= 0) {
          what += (what.empty() ? "" : " ") + algo;
          flags += (flags.empty() ? "" : " ") + ("--algo " + algo);
        }
        note = "Of these, " + what + " on";
        for (size_t i = 0; i < fitRanks.size(); ++i)
          note += (i ? ", " : " ") + std::to_string(fitRanks[i]);
        char day[16] = "";
        const time_t now = time(nullptr);
        struct tm utc {};
        if (gmtime_r(&now, &utc) != nullptr) strftime(day, sizeof(day), "%Y-%m-%d", &utc);
        note += " ranks re-timed alone on " + std::string(day) + " (" + flags + "), the rest kept.";
      }
      if (!writeReference(m, reference.c_str(), note)) {
        fprintf(stderr, "chorus-tune: cannot write %s: %s\n", reference.c_str(), strerror(errno));
        return 1;
      }
      printf("wrote %s\n", reference.c_str());
    }
  }
  if (print) printTable(collective.c_str(), n);
  return 0;
}
