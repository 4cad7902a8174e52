#include "harness.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "device.h"
#include "ideal.h"
#include "json.h"

extern char** environ;

namespace chorus_bench {

std::string tunerCollective(const char* toolName) {
  std::string s;
  for (const char* c = toolName; *c != '\0'; ++c) {
    if (*c != '_') s += *c;
  }
  const std::string suffix = "perf";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    s.resize(s.size() - suffix.size());
  }
  return s;
}

Choice describeChoice(const CollDesc& desc, chorusComm_t comm, size_t count,
                      chorusDataType_t type) {
  const std::string coll = tunerCollective(desc.name);
  if (coll == "sendrecv") return Choice{"direct", "simple", 1, 0.0};
  chorusChoice_t c{};
  const chorusResult_t r = chorusTunerChoice(comm, coll.c_str(), count, type, &c);
  if (r != chorusSuccess) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      std::fprintf(stderr, "chorus bench: chorusTunerChoice(\"%s\") failed: %s (%s)\n",
                   coll.c_str(), chorusGetErrorString(r), chorusGetLastError(nullptr));
    }
    return Choice{"unknown", "unknown", 0, 0.0};
  }
  return Choice{std::string(c.algorithm, strnlen(c.algorithm, sizeof c.algorithm)),
                std::string(c.protocol, strnlen(c.protocol, sizeof c.protocol)), c.nchannels,
                c.predictedUs};
}

namespace {

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

std::string isoNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wallSeconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Page-aligned host memory.
struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

Buffer allocate(size_t bytes) {
  const size_t kAlign = 4096;
  const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "chorus bench: cannot allocate %zu bytes\n", rounded);
    std::_Exit(1);
  }
  std::memset(p, kPoison, rounded);
  return Buffer(p);
}

// -T: after the timeout, abort every communicator of this process and exit non-zero.
class Watchdog {
 public:
  void start(int seconds) {
    if (seconds <= 0) return;
    thread_ = std::thread([this, seconds] { watch(seconds); });
  }
  void add(chorusComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.push_back(comm);
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void watch(int seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) return;
    std::fprintf(stderr, "chorus bench: timeout: still running after %d s (-T), aborting\n",
                 seconds);
    std::fflush(stdout);
    std::fflush(stderr);
    // Abort from a helper thread so that a hung abort cannot keep the process alive.
    std::vector<chorusComm_t> comms = comms_;
    std::thread([comms] {
      for (chorusComm_t c : comms) chorusCommAbort(c);
    }).detach();
    cv_.wait_for(lock, std::chrono::seconds(2), [this] { return done_; });
    std::_Exit(1);
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<chorusComm_t> comms_;
};

// What every rank (thread) of this process shares.
struct Process {
  const CollDesc* desc = nullptr;
  Options opts;
  chorusUniqueId id{};
  int procRank = 0;
  int nprocs = 1;
  int nranks = 1;
  int nnodes = 1;
  int ndevices = 0;  // --device: CUDA devices of this process
  RunInfo run;       // filled by global rank 0
  Watchdog watchdog;
  std::atomic<int> exitCode{0};
};

// The fixed-size record each rank contributes to the "Using devices" lines.
struct WireDevice {
  int32_t rank;
  int32_t pid;
  int32_t thread;
  int32_t reserved;
  char host[64];
};

std::vector<size_t> sweepCounts(const Options& o, const CollDesc& d, size_t typeBytes, int nranks) {
  std::vector<size_t> counts;
  size_t size = o.minBytes;
  while (size <= o.maxBytes) {
    const size_t elems = size / typeBytes;
    const size_t count = d.countPerRank ? elems / static_cast<size_t>(nranks) : elems;
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (o.stepFactor > 1) {
      if (size == 0) {
        size = 1;
      } else if (size > o.maxBytes / o.stepFactor) {
        break;
      } else {
        size *= o.stepFactor;
      }
    } else {
      if (o.stepBytes == 0 || size > o.maxBytes - o.stepBytes) break;
      size += o.stepBytes;
    }
  }
  return counts;
}

uint64_t mixSeed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

IterStats iterStats(std::vector<double> us) {
  IterStats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.minUs = us.front();
  s.maxUs = us.back();
  const size_t n = us.size();
  const size_t p99 = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99Us = us[std::min(n, std::max<size_t>(p99, 1)) - 1];
  double mean = 0.0;
  for (const double v : us) mean += v;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (const double v : us) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n);
  s.cvPercent = mean > 0.0 ? 100.0 * std::sqrt(var) / mean : 0.0;
  return s;
}

// The ideal busbw for B (per-rank intra-node) and I (per-node inter-node) GB/s on nranks ranks
// over q nodes, and the "# Ideal busbw ..." line (empty when neither bandwidth is known).
struct IdealSetup {
  double ideal = 0.0;
  std::string note;
};

IdealSetup computeIdeal(double intraBw, double interBw, int nranks, int q) {
  IdealSetup s;
  if (intraBw <= 0.0 && interBw <= 0.0) return s;
  char buf[256];
  if (nranks % q != 0) {
    std::snprintf(buf, sizeof buf,
                  "# Ideal busbw unknown: %d ranks do not split evenly over CHORUS_NNODES=%d",
                  nranks, q);
  } else {
    const int ppn = nranks / q;
    s.ideal = idealBusBw(intraBw, interBw, ppn, q);
    if (s.ideal > 0.0) {
      std::snprintf(buf, sizeof buf,
                    "# Ideal busbw: %g GB/s (intra-node %g GB/s per rank, inter-node %g GB/s per "
                    "node, %d ranks per node, %d nodes)",
                    s.ideal, intraBw, interBw, ppn, q);
    } else {
      std::snprintf(
          buf, sizeof buf, "# Ideal busbw unknown: %d nodes need %s", q,
          q > 1 ? "--inter-bw (and --intra-bw with several ranks per node)" : "--intra-bw");
    }
  }
  s.note = buf;
  return s;
}

// --calibrate: how many timed exchanges a measurement takes the best of (after one warm-up
// exchange). The message size is --calibrate-bytes (32 MiB by default).
constexpr int kCalibrationIters = 5;

// "32 MiB", "64 KiB", "1000 B".
std::string bytesText(size_t b) {
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// One rank: its communicator, stream, buffers and the sweep.
class RankRunner {
 public:
  RankRunner(Process* p, int thread)
      : p_(p),
        d_(*p->desc),
        o_(p->opts),
        thread_(thread),
        rank_(p->procRank * p->opts.nThreads + thread),
        nranks_(p->nranks),
        printer_(rank_ == 0),
        intraBw_(p->opts.intraBw),
        interBw_(p->opts.interBw) {}

  int run();

 private:
  void check(chorusResult_t r, const char* what) const {
    if (r != chorusSuccess) failCall(what, r, comm_, rank_);
  }
  void init();
  void gatherDevices();
  void calibrate();
  double exchangeBandwidth(int a, int b);
  TableStyle tableStyle() const;
  void printPreamble();
  void barrier();
  double combineTime(double v);
  std::vector<double> combineTimes(std::vector<double> v);
  int64_t sumAcrossRanks(int64_t v);
  RowResult runSize(chorusDataType_t type, int op, int root, size_t count);
  PlacementResult runPlacement(const Layout& l, bool inPlace, chorusDataType_t type, int op,
                               int root, size_t count, uint64_t seed);
  // Fills the send data and poisons the output; sets send_ / recv_.
  void prepare(const Layout& l, bool inPlace, const DataSpec& spec);
  void launchIteration(const CallArgs& a, int nops);
  void printFooter();

  Process* p_;
  const CollDesc& d_;
  const Options& o_;
  int thread_;
  int rank_;
  int nranks_;
  bool printer_;
  chorusComm_t comm_ = nullptr;
  chorusStream_t stream_ = nullptr;
  // --device: the measured collective runs on devComm_ (bound to device_) with device copies of
  // sendBuf_ / recvBuf_; comm_ stays a host communicator for the harness's own exchanges.
  chorusComm_t devComm_ = nullptr;
  int device_ = -1;
  void* devSend_ = nullptr;
  void* devRecv_ = nullptr;
  chorusComm_t collComm() const { return devComm_ != nullptr ? devComm_ : comm_; }
  // The device address of a host-mirror address inside sendBuf_ / recvBuf_ (itself without
  // --device).
  void* onDevice(const unsigned char* p) const;
  Buffer sendBuf_, recvBuf_, expBuf_;
  size_t capBytes_ = 0;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  static constexpr size_t kGuardBytes = 64;
  // Totals (meaningful on every rank: wrong counts are summed across ranks).
  int64_t wrongTotal_ = 0;
  double busBwSum_ = 0.0;
  int64_t busBwEntries_ = 0;
  // The bandwidths behind the ideal column (flags, else --calibrate) and the ideal itself.
  double intraBw_ = 0.0;
  double interBw_ = 0.0;
  double ideal_ = 0.0;
  std::vector<std::string> calibrationNotes_;  // printed by rank 0 in the preamble
  std::string idealNote_;
};

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
  sendBuf_ = allocate(capBytes_);
  recvBuf_ = allocate(capBytes_ + kGuardBytes);
  if (o_.check > 0) expBuf_ = allocate(capBytes_);
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

// One bidirectional exchange of --calibrate-bytes between ranks a and b (each sends the message
// to the other and receives the other's, one chorusSend and one chorusRecv in a group), timed on
// rank a; the best of kCalibrationIters after a warm-up. Every rank calls it (the barrier keeps
// the other ranks out of the way); it returns GB/s = bytes / time on rank a and 0 elsewhere.
double RankRunner::exchangeBandwidth(int a, int b) {
  barrier();
  double best = 0.0;
  if (rank_ == a || rank_ == b) {
    const int peer = rank_ == a ? b : a;
    const size_t bytes = o_.calibrateBytes;
    Buffer sendBuf = allocate(bytes);
    Buffer recvBuf = allocate(bytes);
    for (int it = -1; it < kCalibrationIters; ++it) {
      const double t0 = wallSeconds();
      check(chorusGroupStart(), "chorusGroupStart (calibration)");
      check(chorusSend(sendBuf.get(), bytes, chorusUint8, peer, comm_, nullptr),
            "chorusSend (calibration)");
      check(chorusRecv(recvBuf.get(), bytes, chorusUint8, peer, comm_, nullptr),
            "chorusRecv (calibration)");
      check(chorusGroupEnd(), "chorusGroupEnd (calibration)");
      const double seconds = wallSeconds() - t0;
      if (it >= 0 && seconds > 0.0) {
        best = std::max(best, static_cast<double>(bytes) / seconds / 1e9);
      }
    }
  }
  return rank_ == a ? best : 0.0;
}

// --calibrate: B between ranks 0 and 1 (same node), I between rank 0 and rank P, the first rank
// of the second node (ranks are laid out node-major, P = nranks / CHORUS_NNODES per node). Flags
// given explicitly win over the measured values.
void RankRunner::calibrate() {
  const int q = p_->nnodes;
  char buf[256];
  if (nranks_ < 2) {
    calibrationNotes_.push_back("# Calibration skipped: one rank, no peer to measure against");
    return;
  }
  if (nranks_ % q != 0) {
    std::snprintf(buf, sizeof buf,
                  "# Calibration skipped: %d ranks do not split evenly over CHORUS_NNODES=%d",
                  nranks_, q);
    calibrationNotes_.push_back(buf);
    return;
  }
  const int ppn = nranks_ / q;
  double measured[2] = {-1.0, -1.0};  // B, I; negative: not measured
  if (ppn >= 2) measured[0] = exchangeBandwidth(0, 1);
  if (q >= 2) measured[1] = exchangeBandwidth(0, ppn);
  // Rank 0 timed both: make every rank agree (and wait for the measurements to end).
  double agreed[2] = {0.0, 0.0};
  check(chorusAllReduce(measured, agreed, 2, chorusFloat64, chorusMax, comm_, nullptr),
        "share calibration");
  const std::string size = bytesText(o_.calibrateBytes);
  if (agreed[0] >= 0.0) {
    std::snprintf(
        buf, sizeof buf,
        "# Calibrated intra-node bandwidth B = %.3f GB/s (ranks 0 <-> 1, %s each way, best "
        "of %d)%s",
        agreed[0], size.c_str(), kCalibrationIters,
        o_.intraBw > 0.0 ? "; --intra-bw given, using that" : "");
    if (o_.intraBw <= 0.0) intraBw_ = agreed[0];
  } else {
    std::snprintf(buf, sizeof buf,
                  "# Calibrated intra-node bandwidth B: not measured (one rank "
                  "per node)");
  }
  calibrationNotes_.push_back(buf);
  if (agreed[1] >= 0.0) {
    std::snprintf(
        buf, sizeof buf,
        "# Calibrated inter-node bandwidth I = %.3f GB/s (ranks 0 <-> %d, %s each way, best "
        "of %d)%s",
        agreed[1], ppn, size.c_str(), kCalibrationIters,
        o_.interBw > 0.0 ? "; --inter-bw given, using that" : "");
    if (o_.interBw <= 0.0) interBw_ = agreed[1];
    calibrationNotes_.push_back(buf);
  }
  if (printer_) {
    p_->run.calibratedIntraBw = agreed[0];
    p_->run.calibratedInterBw = agreed[1];
  }
}

TableStyle RankRunner::tableStyle() const {
  TableStyle style;
  style.cpuTime = o_.cpuTime != 0;
  style.perIter = o_.perIterTiming != 0;
  style.ideal = intraBw_ > 0.0 || interBw_ > 0.0;
  return style;
}

void RankRunner::printPreamble() {
  const Options& o = o_;
  int version = 0;
  chorusGetVersion(&version);
  std::printf("# chorus-tests version %d.%d.%d chorus-headers=%d chorus-library=%d\n",
              version / 10000, (version / 100) % 100, version % 100, CHORUS_VERSION_CODE, version);
  std::printf("# Collective test starting: %s\n", d_.name);
  const bool factor = o.stepFactor > 1;
  std::printf(
      "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: %d validation: %d graph: %d\n",
      o.nThreads, o.nGpus, o.minBytes, o.maxBytes, factor ? o.stepFactor : o.stepBytes,
      factor ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, o.graph);
  if (o.blocking) {
    std::printf("# Blocking Enabled: wait for completion after each collective\n");
  }
  for (const std::string& note : o.notes) std::printf("%s\n", note.c_str());
  for (const std::string& note : calibrationNotes_) std::printf("%s\n", note.c_str());
  if (!idealNote_.empty()) std::printf("%s\n", idealNote_.c_str());
  std::printf("#\n# Using devices\n");
  for (const DeviceInfo& dev : p_->run.devices) {
    if (o_.device) {
      std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cuda]\n", dev.rank, 0, dev.pid,
                  dev.hostname.c_str(), dev.rank % std::max(1, p_->ndevices));
      continue;
    }
    std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu]\n", dev.rank, 0, dev.pid,
                dev.hostname.c_str(), dev.thread);
  }
  std::printf("#\n");
  std::fputs(formatHeader(tableStyle()).c_str(), stdout);
  std::fflush(stdout);
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

PlacementResult RankRunner::runPlacement(const Layout& l, bool inPlace, chorusDataType_t type,
                                         int op, int root, size_t count, uint64_t seed) {
  PlacementResult res;
  const size_t ts = typeSize(type);
  DataSpec spec;
  spec.type = type;
  spec.op = d_.hasOp ? op : kNoOp;
  spec.nranks = nranks_;
  spec.seed = seed;
  prepare(l, inPlace, spec);
  CallArgs a{onDevice(send_),
             onDevice(recv_),
             count,
             type,
             static_cast<chorusRedOp_t>(d_.hasOp ? op : chorusSum),
             root < 0 ? 0 : root,
             rank_,
             nranks_,
             collComm(),
             stream_};

  // Warm-up, then the timed iterations.
  for (int i = 0; i < o_.warmupIters; ++i) launchIteration(a, o_.aggIters);
  check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
  barrier();
  const bool perIter = o_.perIterTiming != 0;
  std::vector<double> iterUs(perIter ? static_cast<size_t>(o_.iters) : 0);
  const double cpu0 = cpuSeconds();
  const double t0 = wallSeconds();
  for (int it = 0; it < o_.iters; ++it) {
    const double ti = perIter ? wallSeconds() : 0.0;
    launchIteration(a, o_.aggIters);
    if (o_.blocking || perIter) {
      check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
    }
    if (perIter) iterUs[static_cast<size_t>(it)] = (wallSeconds() - ti) * 1e6 / o_.aggIters;
  }
  check(chorusStreamSynchronize(stream_), "chorusStreamSynchronize");
  const double nops = static_cast<double>(o_.iters) * o_.aggIters;
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

RowResult RankRunner::runSize(chorusDataType_t type, int op, int root, size_t count) {
  RowResult row;
  const Layout l = d_.layout(count, nranks_, rank_);
  row.bytes = std::max(l.sendCount, l.recvCount) * typeSize(type);
  row.count = count;
  row.type = type;
  row.op = d_.hasOp ? op : kNoOp;
  row.root = d_.hasRoot ? root : -1;
  row.ideal = ideal_;
  if (printer_) row.choice = describeChoice(d_, collComm(), count, type);
  uint64_t seed = mixSeed(0xc0705u, static_cast<uint64_t>(type));
  seed = mixSeed(seed, static_cast<uint64_t>(op + 1));
  seed = mixSeed(seed, static_cast<uint64_t>(root + 1));
  seed = mixSeed(seed, count);
  row.outOfPlace = runPlacement(l, false, type, op, row.root, count, mixSeed(seed, 1));
  row.inPlace = runPlacement(l, true, type, op, row.root, count, mixSeed(seed, 2));
  for (const PlacementResult* pr : {&row.outOfPlace, &row.inPlace}) {
    if (pr->wrong > 0) wrongTotal_ += pr->wrong;
    busBwSum_ += pr->busBw;
    ++busBwEntries_;
  }
  return row;
}

void RankRunner::printFooter() {
  const double avgBw = busBwEntries_ > 0 ? busBwSum_ / static_cast<double>(busBwEntries_) : 0.0;
  std::printf("# Out of bounds values : %ld %s\n", static_cast<long>(wrongTotal_),
              wrongTotal_ == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n", avgBw);
  RunInfo& run = p_->run;
  run.outOfBounds = wrongTotal_;
  run.avgBusBw = avgBw;
  if (ideal_ > 0.0) {
    run.avgEfficiency = efficiencyPercent(avgBw, ideal_);
    std::printf("# Avg efficiency       : %.2f%%\n", run.avgEfficiency);
  }
  std::printf("#\n");
  std::printf("# Collective test concluded: %s\n", d_.name);
  std::fflush(stdout);
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
  check(chorusCommDestroy(comm_), "chorusCommDestroy");
  return wrongTotal_ == 0 ? 0 : 1;
}

void collectEnv(RunInfo* run) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("CHORUS_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    run->env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::sort(run->env.begin(), run->env.end());
}

// Q from CHORUS_NNODES (1 when unset).
void setupNodes(Process* p) {
  const char* nn = std::getenv("CHORUS_NNODES");
  if (nn != nullptr && *nn != '\0') {
    const int q = std::atoi(nn);
    if (q >= 1) p->nnodes = q;
  }
}

}  // namespace

int benchMain(int argc, char** argv, const CollDesc& desc) {
  auto p = std::make_unique<Process>();
  p->desc = &desc;
  p->run.collective = desc.name;
  p->run.startTime = isoNow();
  std::string error;
  const char* prog = argc > 0 ? argv[0] : desc.name;
  switch (parseArgs(argc, argv, &p->opts, &error)) {
    case ParseStatus::kHelp:
      printUsage(stdout, prog);
      return 0;
    case ParseStatus::kError:
      if (error == "invalid option") {  // getopt_long has said which
        printUsage(stderr, prog);
      } else {
        std::fprintf(stderr, "%s: %s\nRun '%s -h' for the options.\n", prog, error.c_str(), prog);
      }
      return 1;
    case ParseStatus::kOk:
      break;
  }
  const Options& o = p->opts;

  const chorusResult_t r = chorusUniqueIdFromEnv(&p->id, &p->procRank, &p->nprocs);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "%s: chorusUniqueIdFromEnv failed: %s (%s)\n", prog,
                 chorusGetErrorString(r), chorusGetLastError(nullptr));
    return 1;
  }
  p->nranks = p->nprocs * o.nThreads;
  if (o.device) {
    std::string why;
    if (!deviceAvailable(&p->ndevices, &why)) {
      std::fprintf(stderr, "%s: --device: %s\n", prog, why.c_str());
      return 2;
    }
  }
  if (desc.hasRoot && !o.allRoots && o.root >= p->nranks) {
    if (p->procRank == 0) {
      std::fprintf(stderr, "%s: invalid root %d: there are %d ranks\n", prog, o.root, p->nranks);
    }
    return 1;
  }
  setupNodes(p.get());
  collectEnv(&p->run);
  int version = 0;
  chorusGetVersion(&version);
  p->run.versionCode = version;
  p->run.version = std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
                   "." + std::to_string(version % 100);
  p->run.options = &p->opts;
  p->run.nranks = p->nranks;
  p->run.nprocs = p->nprocs;
  p->run.nnodes = p->nnodes;
  p->run.calibrated = o.calibrate;
  p->run.calibrationBytes = o.calibrateBytes;
  p->run.calibrationIters = kCalibrationIters;

  p->watchdog.start(o.timeoutSec);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.nThreads; ++t) {
    threads.emplace_back([&p, t] {
      RankRunner runner(p.get(), t);
      const int rc = runner.run();
      if (rc != 0) p->exitCode.store(rc);
    });
  }
  for (std::thread& t : threads) t.join();
  p->watchdog.stop();

  if (p->procRank == 0 && !o.jsonFile.empty()) {
    p->run.endTime = isoNow();
    if (!writeJsonFile(o.jsonFile, p->run)) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", prog, o.jsonFile.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  return p->exitCode.load();
}

}  // namespace chorus_bench
