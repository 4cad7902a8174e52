// RankRunner (rank_runner.h): a rank's communicator, buffers and devices, the sweep, and the
// timed and checked iterations of each row.
#include "rank_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "check.h"
#include "clocks.h"
#include "device.h"
#include "ideal_note.h"
#include "iter_stats.h"
#include "sweep.h"

namespace chorus_bench {

// A failed library call ends the process: the other ranks see a dead peer (or time out), as
// with nccl-tests' NCCLCHECK.
void failCall(const char* what, chorusResult_t r, chorusComm_t comm, int rank) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "%s: Test Chorus failure: rank %d: %s: '%s' (%s)\n", host, rank, what,
               chorusGetErrorString(r), chorusGetLastError(comm));
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

void RankRunner::init() {
  check(chorusCommInitRank(&comm_, nranks_, p_->id, rank_), "chorusCommInitRank");
  p_->watchdog.add(comm_);
  // Operations run on the null stream (each call completes before it returns, executed by the
  // rank's own thread: the CPU equivalent of nccl-tests' launch-then-synchronize); with
  // CHORUS_BENCH_STREAM=1 they are queued on a created chorusStream_t instead.
  const char* useStream = std::getenv("CHORUS_BENCH_STREAM");
  if (useStream != nullptr && std::atoi(useStream) != 0)
    check(chorusStreamCreate(&stream_), "chorusStreamCreate");
  capBytes_ = o_.maxBytes;
  sendBuf_ = allocate(capBytes_, o_.registerBuffers == 1);
  recvBuf_ = allocate(capBytes_ + kGuardBytes, o_.registerBuffers == 1);
  if (o_.check > 0) expBuf_ = allocate(capBytes_);
  if (o_.registerBuffers != 0 && !o_.device) {  // collective: every rank registers both, in order
    check(chorusCommRegister(comm_, sendBuf_.get(), std::max<size_t>(capBytes_, 1), &sendHandle_),
          "chorusCommRegister (send buffer)");
    check(chorusCommRegister(comm_, recvBuf_.get(), capBytes_ + kGuardBytes, &recvHandle_),
          "chorusCommRegister (receive buffer)");
  }
  if (o_.device) {
    device_ = rank_ % std::max(1, p_->ndevices);
    deviceSelect(device_);
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.cudaDevice = device_;
    check(chorusCommSplit(comm_, 0, rank_, &devComm_, &cfg),
          "chorusCommSplit (device communicator)");
    p_->watchdog.add(devComm_);
    devSend_ = deviceAlloc(capBytes_);
    devRecv_ = deviceAlloc(capBytes_ + kGuardBytes);
  }
}

void* RankRunner::onDevice(const unsigned char* p) const {
  if (devComm_ == nullptr || p == nullptr) return const_cast<unsigned char*>(p);
  const unsigned char* s = sendBuf_.get();
  const unsigned char* r = recvBuf_.get();
  if (p >= s && p <= s + capBytes_) return static_cast<unsigned char*>(devSend_) + (p - s);
  return static_cast<unsigned char*>(devRecv_) + (p - r);
}

void RankRunner::barrier() {
  int32_t in = 0, out = 0;
  check(chorusAllReduce(&in, &out, 1, chorusInt32, chorusSum, comm_, nullptr), "barrier");
}

double RankRunner::combineTime(double v) {
  if (o_.average == 0) return v;  // rank 0's own figure (only rank 0 prints)
  double out = 0.0;
  const chorusRedOp_t op = o_.average == 2 ? chorusMin : o_.average == 3 ? chorusMax : chorusSum;
  check(chorusAllReduce(&v, &out, 1, chorusFloat64, op, comm_, nullptr), "combine times");
  return o_.average == 1 ? out / nranks_ : out;
}

std::vector<double> RankRunner::combineTimes(std::vector<double> v) {
  if (o_.average == 0 || v.empty()) return v;
  std::vector<double> out(v.size());
  const chorusRedOp_t op = o_.average == 2 ? chorusMin : o_.average == 3 ? chorusMax : chorusSum;
  check(chorusAllReduce(v.data(), out.data(), v.size(), chorusFloat64, op, comm_, nullptr),
        "combine per-iteration times");
  if (o_.average == 1) {
    for (double& x : out) x /= nranks_;
  }
  return out;
}

int64_t RankRunner::sumAcrossRanks(int64_t v) {
  int64_t out = 0;
  check(chorusAllReduce(&v, &out, 1, chorusInt64, chorusSum, comm_, nullptr), "sum wrong counts");
  return out;
}

void RankRunner::gatherDevices() {
  WireDevice mine{};
  mine.rank = rank_;
  mine.pid = static_cast<int32_t>(getpid());
  mine.thread = thread_;
  gethostname(mine.host, sizeof mine.host - 1);
  mine.host[sizeof mine.host - 1] = '\0';
  std::vector<WireDevice> all(static_cast<size_t>(nranks_));
  check(chorusAllGather(&mine, all.data(), sizeof(WireDevice), chorusInt8, comm_, nullptr),
        "gather device list");
  if (!printer_) return;
  for (const WireDevice& w : all) {
    DeviceInfo dev;
    dev.rank = w.rank;
    dev.pid = w.pid;
    dev.thread = w.thread;
    dev.hostname.assign(w.host, strnlen(w.host, sizeof w.host));
    p_->run.devices.push_back(dev);
  }
}

void RankRunner::prepare(const Layout& l, bool inPlace, const DataSpec& spec) {
  const size_t ts = typeSize(spec.type);
  unsigned char* base = recvBuf_.get();
  if (inPlace) {
    std::memset(base, kPoison, std::max(l.sendCount, l.recvCount) * ts);
    send_ = base + l.sendInPlaceOffset * ts;
    recv_ = base + l.recvInPlaceOffset * ts;
  } else {
    std::memset(base, kPoison, l.recvCount * ts + kGuardBytes);
    send_ = sendBuf_.get();
    recv_ = base;
  }
  fillInput(spec, rank_, 0, l.sendCount, send_);
  if (devComm_ != nullptr) {  // the device copies get exactly the host mirrors' contents
    const size_t recvBytes =
        inPlace ? std::max(l.sendCount, l.recvCount) * ts : l.recvCount * ts + kGuardBytes;
    deviceCopyToDevice(devRecv_, base, recvBytes);
    if (!inPlace) deviceCopyToDevice(devSend_, send_, l.sendCount * ts);
  }
}

void RankRunner::launchIteration(const CallArgs& a, int nops) {
  if (nops > 1) check(chorusGroupStart(), "chorusGroupStart");
  for (int i = 0; i < nops; ++i) check(d_.launch(a), d_.name);
  if (nops > 1) check(chorusGroupEnd(), "chorusGroupEnd");
}

CallArgs RankRunner::prepareCall(const Layout& l, bool inPlace, chorusDataType_t type, int op,
                                 int root, size_t count, uint64_t seed, DataSpec* spec) {
  spec->type = type;
  spec->op = d_.hasOp ? op : kNoOp;
  spec->nranks = nranks_;
  spec->seed = seed;
  prepare(l, inPlace, *spec);
  return CallArgs{onDevice(send_),
                  onDevice(recv_),
                  count,
                  type,
                  static_cast<chorusRedOp_t>(d_.hasOp ? op : chorusSum),
                  root < 0 ? 0 : root,
                  rank_,
                  nranks_,
                  collComm(),
                  stream_};
}

void RankRunner::warmUpCalls(const CallArgs& a) {
  for (int i = 0; i < o_.warmupIters; ++i) launchIteration(a, o_.aggIters);
  check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
  barrier();
}

PlacementResult RankRunner::runPlacement(const Layout& l, bool inPlace, chorusDataType_t type,
                                         int op, int root, size_t count, uint64_t seed) {
  PlacementResult res;
  const size_t ts = typeSize(type);
  DataSpec spec;
  CallArgs a = prepareCall(l, inPlace, type, op, root, count, seed, &spec);

  // Warm-up, then the timed iterations.
  warmUpCalls(a);
  const bool perIter = o_.perIterTiming != 0;
  const size_t callBytes = std::max(l.sendCount, l.recvCount) * ts;
  const int iters = o_.smallIters > 0 && callBytes <= kSmallItersBytes ? o_.smallIters : o_.iters;
  std::vector<double> iterUs(perIter ? static_cast<size_t>(iters) : 0);
  const double cpu0 = cpuSeconds();
  const double t0 = wallSeconds();
  for (int it = 0; it < iters; ++it) {
    const double ti = perIter ? wallSeconds() : 0.0;
    launchIteration(a, o_.aggIters);
    if (o_.blocking || perIter) {
      check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
    }
    if (perIter) iterUs[static_cast<size_t>(it)] = (wallSeconds() - ti) * 1e6 / o_.aggIters;
  }
  check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
  const double nops = static_cast<double>(iters) * o_.aggIters;
  double seconds = (wallSeconds() - t0) / nops;
  if (o_.cpuTime) seconds = (cpuSeconds() - cpu0) / nops / o_.nThreads;
  seconds = combineTime(seconds);
  if (perIter) res.iter = iterStats(combineTimes(iterUs));

  const double bytes = static_cast<double>(std::max(l.sendCount, l.recvCount) * ts);
  res.timeUs = seconds * 1e6;
  res.algBw = seconds > 0.0 ? bytes / seconds / 1e9 : 0.0;
  res.busBw = res.algBw * d_.busBwFactor(nranks_);

  // Checked iterations: fresh inputs, poisoned outputs, one call, compare.
  if (o_.check > 0 && (!inPlace || d_.checkInPlace)) {
    int64_t wrong = 0;
    for (int c = 0; c < o_.check; ++c) {
      spec.seed = mixSeed(seed, static_cast<uint64_t>(c) + 1);
      prepare(l, inPlace, spec);
      a.sendbuff = onDevice(send_);
      a.recvbuff = onDevice(recv_);
      check(d_.launch(a), d_.name);
      check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
      if (devComm_ != nullptr) {  // compare on the host: bring the whole receive side back
        unsigned char* base = recvBuf_.get();
        const size_t recvBytes =
            inPlace ? std::max(l.sendCount, l.recvCount) * ts : l.recvCount * ts + kGuardBytes;
        deviceCopyToHost(base, devRecv_, recvBytes);
      }
      ExpectArgs e{spec, count, rank_, nranks_, root < 0 ? 0 : root};
      const size_t n = d_.expected(e, expBuf_.get());
      int64_t w = static_cast<int64_t>(countWrong(spec, recv_, expBuf_.get(), n));
      if (!inPlace) {  // nothing may be written past the receive buffer
        const unsigned char* guard = recv_ + l.recvCount * ts;
        for (size_t j = 0; j < kGuardBytes; j += ts) {
          for (size_t k = j; k < std::min(kGuardBytes, j + ts); ++k) {
            if (guard[k] != kPoison) {
              ++w;
              break;
            }
          }
        }
      }
      wrong = std::max(wrong, w);
    }
    res.wrong = sumAcrossRanks(wrong);
  } else if (o_.check > 0) {
    res.wrong = -1;
  }
  return res;
}

void RankRunner::warmUp(chorusDataType_t type, int op, int root, size_t count) {
  DataSpec spec;
  warmUpCalls(prepareCall(d_.layout(count, nranks_, rank_), false, type, op, root, count,
                          mixSeed(0x3a7b0u, count), &spec));
}

RowResult RankRunner::runSize(chorusDataType_t type, int op, int root, size_t count) {
  RowResult row;
  const Layout l = d_.layout(count, nranks_, rank_);
  row.bytes = std::max(l.sendCount, l.recvCount) * typeSize(type);
  row.count = count;
  row.type = type;
  row.op = d_.hasOp ? op : kNoOp;
  row.root = d_.hasRoot ? root : -1;
  row.ideal = ideal_;
  uint64_t seed = mixSeed(0xc0705u, static_cast<uint64_t>(type));
  seed = mixSeed(seed, static_cast<uint64_t>(op + 1));
  seed = mixSeed(seed, static_cast<uint64_t>(root + 1));
  seed = mixSeed(seed, count);
  row.outOfPlace = runPlacement(l, false, type, op, row.root, count, mixSeed(seed, 1));
  row.inPlace = runPlacement(l, true, type, op, row.root, count, mixSeed(seed, 2));
  // Asked after the calls: the model as they left them, so the predicted time is for what ran.
  if (printer_) row.choice = describeChoice(d_, collComm(), count, type);
  for (const PlacementResult* pr : {&row.outOfPlace, &row.inPlace}) {
    if (pr->wrong > 0) wrongTotal_ += pr->wrong;
    busBwSum_ += pr->busBw;
    ++busBwEntries_;
  }
  return row;
}

int RankRunner::run() {
  init();
  gatherDevices();
  if (o_.calibrate) calibrate();
  const IdealSetup ideal = computeIdeal(intraBw_, interBw_, nranks_, p_->nnodes);
  ideal_ = ideal.ideal;
  idealNote_ = ideal.note;
  if (printer_) {
    p_->run.intraBw = intraBw_;
    p_->run.interBw = interBw_;
    printPreamble();
  }

  std::vector<int> ops = d_.hasOp ? o_.ops : std::vector<int>{kNoOp};
  std::vector<int> roots;
  if (!d_.hasRoot) {
    roots.push_back(-1);
  } else if (o_.allRoots) {
    for (int r = 0; r < nranks_; ++r) roots.push_back(r);
  } else {
    roots.push_back(o_.root);
  }
  const TableStyle style = tableStyle();

  for (int cycle = 0; o_.runCycles == 0 || cycle < o_.runCycles; ++cycle) {
    for (const chorusDataType_t type : o_.types) {
      const std::vector<size_t> counts = sweepCounts(o_, d_, typeSize(type), nranks_);
      for (const int op : ops) {
        for (const int root : roots) {
          // As nccl-tests' TimeTest: warm up at the largest size and then the smallest before
          // the sweep, so that its first size does not pay the launch's first calls (on more
          // ranks than cores, the ranks' scheduling settling; every buffer's first touch).
          if (o_.warmupIters > 0 && !counts.empty()) {
            warmUp(type, op, root, counts.back());
            warmUp(type, op, root, counts.front());
          }
          for (const size_t count : counts) {
            RowResult row = runSize(type, op, root, count);
            if (!printer_) continue;
            std::fputs(formatRow(style, row).c_str(), stdout);
            std::fflush(stdout);
            for (const auto& [pr, where] : {std::pair{&row.outOfPlace, "out-of-place"},
                                            std::pair{&row.inPlace, "in-place"}}) {
              if (pr->wrong > 0) {
                char buf[256];
                std::snprintf(buf, sizeof buf,
                              "%s: %ld wrong values (%s %s root %d, %zu bytes, count %zu, %s)",
                              d_.name, static_cast<long>(pr->wrong), typeName(type), opName(row.op),
                              row.root, row.bytes, row.count, where);
                p_->run.errors.push_back(buf);
              }
            }
            if (o_.runCycles == 0) continue;  // forever: do not keep every row
            p_->run.results.push_back(std::move(row));
          }
        }
      }
    }
  }
  if (printer_) printFooter();

  if (stream_ != nullptr) check(chorusStreamDestroy(stream_), "chorusStreamDestroy");
  if (devComm_ != nullptr) {
    check(chorusCommDestroy(devComm_), "chorusCommDestroy (device communicator)");
    deviceFree(devSend_);
    deviceFree(devRecv_);
  }
  if (recvHandle_ != nullptr)
    check(chorusCommDeregister(comm_, recvHandle_), "chorusCommDeregister");
  if (sendHandle_ != nullptr)
    check(chorusCommDeregister(comm_, sendHandle_), "chorusCommDeregister");
  check(chorusCommDestroy(comm_), "chorusCommDestroy");
  return wrongTotal_ == 0 ? 0 : 1;
}

}  // namespace chorus_bench
