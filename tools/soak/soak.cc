// chorus-soak: random collectives on 4..8 ranks (processes, then threads) for a bounded time,
// with splits, destroys, aborts and SIGKILLed sub-communicators, every result checked against
// values each rank computes on its own, and the process's file descriptors, /dev/shm names,
// threads and RSS compared between a checkpoint after warm-up and the end (tools/soak/README.md).
//
// One program, three roles:
//   driver (default): starts the ranks of each mode, runs the kill jobs, checks, summarises;
//   --role world: the long-lived ranks (P processes x T threads) of one mode;
//   --role job: the ranks of a short job that the driver SIGKILLs a part of.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "data.h"

extern char** environ;

using namespace soak;

namespace {

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::mutex gOut;
void say(const std::string& s) {
  std::lock_guard<std::mutex> l(gOut);
  fputs(s.c_str(), stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

struct Options {
  std::string role = "driver";
  std::string mode = "both";  // driver: threads, procs or both
  double seconds = 1800;
  uint64_t seed = 0;
  bool seedGiven = false;
  int procs = 1, threads = 1;
  size_t maxBytes = size_t(64) << 20;
  size_t jobMaxBytes = size_t(4) << 20;
  int timeout = 120;  // CHORUS_TIMEOUT of the world ranks (seconds)
  int hang = 0;       // watchdog bound (seconds); 0: timeout + 90
  double rssSlackMb = 48;
  bool keepLogs = false;
  bool quarantine = false;  // jobs keep the buffers of a failed call (finding 2)
  pid_t parent = 0;
};

// ------------------------------------------------------------------------------------------
// Resources of this process.
struct Res {
  long fds = -1, threads = -1, rssKb = -1, shmOwn = -1, shmAll = -1;
  std::string seen;  // a checkpoint's: its descriptors and thread names (describeRes)
};

long countEntries(const char* path) {
  DIR* d = opendir(path);
  if (!d) return -1;
  long n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

std::vector<std::string> shmNames(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
  closedir(d);
  return out;
}

// What the descriptors and threads are (printed when a count differs).
std::string describeRes() {
  std::string out = "fds:";
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char link[256] = {0};
      const std::string p = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(p.c_str(), link, sizeof(link) - 1) > 0)
        out += std::string(" ") + e->d_name + "=" + link;
    }
    closedir(d);
  }
  out += " threads:";
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string name;
      std::getline(in, name);
      out += " " + name;
    }
    closedir(d);
  }
  return out;
}

Res sampleRes() {
  Res r;
  r.fds = countEntries("/proc/self/fd");
  if (r.fds > 0) --r.fds;  // the directory's own descriptor while it is read
  r.threads = countEntries("/proc/self/task");
  long size = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &size, &resident) == 2)
      r.rssKb = resident * (sysconf(_SC_PAGESIZE) / 1024);
    fclose(f);
  }
  r.shmOwn = long(shmNames(fmt("chorus-%d-", int(getpid()))).size());
  r.shmAll = long(shmNames("chorus").size());
  return r;
}

// ------------------------------------------------------------------------------------------
// Counters of one rank process.
struct Counters {
  std::atomic<uint64_t> ops{0}, wrong{0}, coll[kNumColl]{}, groups{0}, inPlace{0}, streamOps{0},
      bytes{0}, zero{0}, large{0}, splits{0}, noColor{0}, finalizes{0}, aborts{0}, abortChecks{0},
      bad{0}, tempStreams{0}, epochs{0};
};
Counters gc;

void bad(const std::string& what) {
  gc.bad++;
  say("SOAK-BAD " + what);
}

int blamedRank(const std::string& m) {
  static const std::regex prefix("^rank [0-9]+: ");
  static const std::regex rank("rank ([0-9]+)");
  std::smatch sm;
  std::string rest = m;
  if (std::regex_search(m, sm, prefix)) rest = sm.suffix().str();
  if (std::regex_search(rest, sm, rank)) return std::stoi(sm[1].str());
  return -1;
}

struct Fail {
  chorusResult_t rc = chorusSuccess;
  std::string msg;
  const char* how = "";  // call, sync (chorusStreamSynchronize) or call+sync
};

// Runs random operations on one communicator; all its ranks draw the same ones.
// Buffers of failed calls kept until the process ends (--quarantine-failed; finding 2 of
// tools/soak/README.md: a peer thread of the same process may still read them).
std::mutex gGraveMu;
std::vector<Prepared> gGraveyard;
bool gQuarantine = false;

void bury(std::vector<Prepared>& ps) {
  if (!gQuarantine) return;
  std::lock_guard<std::mutex> l(gGraveMu);
  for (Prepared& p : ps) gGraveyard.push_back(std::move(p));
  ps.clear();
}

class Runner {
 public:
  Runner(chorusComm_t comm, int me, int n, chorusStream_t stream, size_t maxBytes, std::string tag,
         std::atomic<double>* hb)
      : comm_(comm),
        me_(me),
        n_(n),
        stream_(stream),
        maxBytes_(maxBytes),
        tag_(std::move(tag)),
        hb_(hb) {}
  void setStream(chorusStream_t s) { stream_ = s; }

  bool steps(Rng& r, int k, Fail* f) {
    for (int i = 0; i < k; ++i)
      if (!step(r, f)) return false;
    return flush(f);
  }

  // One draw: a single operation or a group of 2..4, on the NULL stream or the rank's stream.
  bool step(Rng& r, Fail* f) {
    const bool onStream = r.chance(0.4);
    const chorusStream_t s = onStream ? stream_ : nullptr;
    const int group = r.chance(0.2) ? 2 + int(r.below(3)) : 0;
    std::vector<OpDesc> ds;
    for (int i = 0; i < std::max(group, 1); ++i)
      ds.push_back(drawOp(r, n_, group ? maxBytes_ / size_t(group) : maxBytes_));
    const size_t depth = 1 + r.below(3);
    return run(ds, s, group > 0, depth, f);
  }

  bool run(const std::vector<OpDesc>& ds, chorusStream_t s, bool group, size_t depth, Fail* f) {
    if (!pending_.empty() && s != pendingStream_ && !flush(f)) return false;
    std::vector<Prepared> ps;
    for (const OpDesc& d : ds) ps.push_back(prepare(d, me_, n_));
    chorusResult_t rc = chorusSuccess;
    if (group) {
      rc = chorusGroupStart();
      for (Prepared& p : ps) {
        const chorusResult_t r1 = issue(p, comm_, s);
        if (rc == chorusSuccess) rc = r1;
      }
      const chorusResult_t r2 = chorusGroupEnd();
      if (rc == chorusSuccess) rc = r2;
      gc.groups++;
    } else {
      rc = issue(ps[0], comm_, s);
    }
    if (hb_) hb_->store(now());
    for (const OpDesc& d : ds) {
      gc.ops++;
      gc.coll[d.coll]++;
      if (d.inPlace) gc.inPlace++;
      if (s) gc.streamOps++;
      if (d.count == 0) gc.zero++;
      const size_t b = bytesMoved(d, n_);
      gc.bytes += b;
      if (b >= (size_t(8) << 20)) gc.large++;
    }
    if (rc != chorusSuccess) {
      f->rc = rc;
      f->msg = chorusGetLastError(comm_);
      f->how = "call";
      lastOp_ = ds[0].describe();
      // An operation queued on a stream may have failed while this one was enqueued: the
      // enqueue is then refused (chorusInvalidUsage, "communicator failed earlier") and the
      // cause is the stream's first error, which Synchronize returns.
      const chorusStream_t q = s ? s : pendingStream_;
      if (q && (s || !pending_.empty())) {
        const chorusResult_t rs = chorusStreamSynchronize(q);
        if (rs != chorusSuccess) {
          f->rc = rs;
          f->msg = chorusGetLastError(nullptr);
          f->how = "call+sync";
        }
      }
      bury(ps);
      bury(pending_);
      pending_.clear();
      return false;
    }
    if (s == nullptr) {
      for (Prepared& p : ps) check(p);
      return true;
    }
    for (Prepared& p : ps) pending_.push_back(std::move(p));
    pendingStream_ = s;
    if (pending_.size() >= depth) return flush(f);
    return true;
  }

  bool flush(Fail* f) {
    if (pending_.empty()) return true;
    const chorusResult_t rc = chorusStreamSynchronize(pendingStream_);
    if (hb_) hb_->store(now());
    if (rc != chorusSuccess) {
      // The stream's first error is this thread's last error (the communicator's own last
      // error may be a later queued operation's "failed earlier").
      f->rc = rc;
      f->msg = chorusGetLastError(nullptr);
      f->how = "sync";
      lastOp_ = pending_[0].d.describe() + " (on a stream)";
      bury(pending_);
      pending_.clear();
      return false;
    }
    for (Prepared& p : pending_) check(p);
    pending_.clear();
    return true;
  }

  const std::string& lastOp() const { return lastOp_; }

 private:
  void check(const Prepared& p) {
    const std::string e = verify(p);
    if (e.empty()) return;
    gc.wrong++;
    say(fmt("SOAK-WRONG %s rank %d/%d: %s: %s", tag_.c_str(), me_, n_, p.d.describe().c_str(),
            e.c_str()));
  }

  chorusComm_t comm_;
  int me_, n_;
  chorusStream_t stream_;
  size_t maxBytes_;
  std::string tag_;
  std::atomic<double>* hb_;
  std::vector<Prepared> pending_;
  chorusStream_t pendingStream_ = nullptr;
  std::string lastOp_;
};

// ------------------------------------------------------------------------------------------
// Rank processes (world and job roles).
struct Proc {
  Options o;
  int P = 1, T = 1, p = 0;
  bool launcher = false;  // ids from the launcher variables (else chorusCommInitAll)
  std::unique_ptr<std::barrier<>> bar;
  std::vector<chorusComm_t> initAll;
  chorusUniqueId id{};
  int idProcs = 1, idRank = 0;
  Res base, warm, end, after;
  bool warmTaken = false;
  std::unique_ptr<std::atomic<double>[]> hb;
  std::unique_ptr<std::atomic<chorusComm_t>[]> worlds;
  std::atomic<bool> done{false};
  std::atomic<int> threadsWithError{0};
  std::atomic<int> fatal{0};
};

void fatal(Proc& pr, chorusComm_t world, const std::string& what) {
  say("SOAK-FATAL " + what);
  pr.fatal = 1;
  if (world) chorusCommAbort(world);  // the peers fail now instead of at their timeout
  fflush(stdout);
  _exit(2);
}

// The operations of every rank agree on the sequence: each epoch's draws come from
// (seed, epoch), each sub-communicator's from (seed, epoch, color).
// A sample whose descriptor and thread counts hold still for 100 ms (a bootstrap root's
// detached thread ends on its own shortly after the communicator it served is destroyed).
Res settledSample(const Res* want) {
  Res a = sampleRes();
  for (int i = 0; i < 30; ++i) {
    usleep(100000);
    const Res b = sampleRes();
    const bool still = a.fds == b.fds && a.threads == b.threads;
    a = b;
    if (still && (want == nullptr || (a.fds == want->fds && a.threads == want->threads))) break;
  }
  return a;
}

// A checkpoint keeps what it saw (descriptors and thread names); one that does not match the
// sample it is compared with prints both, naming what differs.
void checkpoint(Proc& pr, int t, Res* into, const Res* want = nullptr) {
  pr.bar->arrive_and_wait();
  if (t == 0) {
    *into = settledSample(want);
    into->seen = describeRes();
    if (want != nullptr && (into->fds != want->fds || into->threads != want->threads))
      say("SOAKRES-GREW now " + into->seen + " | before " + want->seen);
  }
  pr.bar->arrive_and_wait();
}

struct RankCtx {
  Proc& pr;
  int t, me, n;
  chorusComm_t world;
  chorusStream_t stream;
  uint64_t seed;
  std::atomic<double>* hb;
  std::string tag;
};

bool initRank(Proc& pr, int t, chorusComm_t* comm, Fail* f) {
  chorusResult_t rc;
  if (!pr.launcher) {
    if (t == 0) {
      pr.initAll.assign(size_t(pr.T), nullptr);
      rc = chorusCommInitAll(pr.initAll.data(), pr.T, nullptr);
      if (rc != chorusSuccess) pr.initAll.clear();
      f->rc = rc;
      f->msg = chorusGetLastError(nullptr);
    }
    pr.bar->arrive_and_wait();
    if (pr.initAll.empty()) {
      if (f->rc == chorusSuccess) f->rc = chorusInternalError;
      return false;
    }
    *comm = pr.initAll[size_t(t)];
    return true;
  }
  if (t == 0) {
    rc = chorusUniqueIdFromEnv(&pr.id, &pr.idRank, &pr.idProcs);
    if (rc != chorusSuccess) pr.idProcs = -1;
  }
  pr.bar->arrive_and_wait();
  if (pr.idProcs < 0) {
    f->rc = chorusSystemError;
    f->msg = "chorusUniqueIdFromEnv failed";
    return false;
  }
  rc = chorusCommInitRank(comm, pr.idProcs * pr.T, pr.id, pr.idRank * pr.T + t);
  if (rc != chorusSuccess) {
    f->rc = rc;
    f->msg = chorusGetLastError(nullptr);
    return false;
  }
  return true;
}

// Members of color `c` in sub-communicator order (key, then parent rank), as chorusCommSplit.
std::vector<int> membersOf(const std::vector<int>& color, const std::vector<int>& key, int c) {
  std::vector<int> m;
  for (size_t r = 0; r < color.size(); ++r)
    if (color[r] == c) m.push_back(int(r));
  std::stable_sort(m.begin(), m.end(),
                   [&](int a, int b) { return key[size_t(a)] < key[size_t(b)]; });
  return m;
}

chorusComm_t doSplit(RankCtx& c, const std::vector<int>& color, const std::vector<int>& key,
                     int* subRank, int* subSize) {
  const int mine = color[size_t(c.me)];
  chorusComm_t sub = nullptr;
  const chorusResult_t rc = chorusCommSplit(c.world, mine, key[size_t(c.me)], &sub, nullptr);
  c.hb->store(now());
  gc.splits++;
  if (rc != chorusSuccess)
    fatal(c.pr, c.world,
          fmt("%s rank %d: chorusCommSplit(color %d): %s: %s", c.tag.c_str(), c.me, mine,
              chorusGetErrorString(rc), chorusGetLastError(c.world)));
  if (mine == CHORUS_SPLIT_NOCOLOR) {
    gc.noColor++;
    if (sub != nullptr)
      bad(fmt("%s rank %d: split with NOCOLOR gave a communicator", c.tag.c_str(), c.me));
    return nullptr;
  }
  const std::vector<int> m = membersOf(color, key, mine);
  *subSize = int(m.size());
  *subRank = int(std::find(m.begin(), m.end(), c.me) - m.begin());
  int cnt = -1, ur = -1;
  chorusCommCount(sub, &cnt);
  chorusCommUserRank(sub, &ur);
  if (cnt != *subSize || ur != *subRank)
    bad(fmt("%s rank %d: split color %d: rank %d of %d, expected %d of %d", c.tag.c_str(), c.me,
            mine, ur, cnt, *subRank, *subSize));
  return sub;
}

void worldBarrier(RankCtx& c, Runner& run, Rng& r) {
  Fail f;
  OpDesc d = makeOp(r, kAllReduce, c.n, 64);
  if (!run.run({d}, nullptr, false, 1, &f))
    fatal(c.pr, c.world,
          fmt("%s rank %d: barrier AllReduce: %s: %s", c.tag.c_str(), c.me,
              chorusGetErrorString(f.rc), f.msg.c_str()));
}

void splitEpisode(RankCtx& c, Runner& run, Rng& er, int epoch) {
  const int ncolors = 1 + int(er.below(3));
  std::vector<int> color(size_t(c.n)), key(size_t(c.n));
  for (int r = 0; r < c.n; ++r) {
    color[size_t(r)] = er.chance(0.1) ? CHORUS_SPLIT_NOCOLOR : int(er.below(size_t(ncolors)));
    key[size_t(r)] = int(er.below(4));
  }
  const bool finalize = er.chance(0.3);
  int sr = -1, sn = 0;
  chorusComm_t sub = doSplit(c, color, key, &sr, &sn);
  if (!sub) return;
  const int mine = color[size_t(c.me)];
  Rng r(mix(c.seed, uint64_t(epoch), uint64_t(mine) + 1));
  Runner sruns(sub, sr, sn, c.stream, c.pr.o.maxBytes, c.tag + fmt("/split%d.%d", epoch, mine),
               c.hb);
  Fail f;
  if (!sruns.steps(r, 2 + int(r.below(8)), &f))
    fatal(c.pr, c.world,
          fmt("%s rank %d (sub rank %d/%d of epoch %d): %s: %s: %s", c.tag.c_str(), c.me, sr, sn,
              epoch, sruns.lastOp().c_str(), chorusGetErrorString(f.rc), f.msg.c_str()));
  chorusResult_t rc = chorusSuccess;
  if (finalize) {
    rc = chorusCommFinalize(sub);
    gc.finalizes++;
  }
  const chorusResult_t rc2 = chorusCommDestroy(sub);
  c.hb->store(now());
  if (rc != chorusSuccess || rc2 != chorusSuccess)
    fatal(c.pr, c.world,
          fmt("%s rank %d: finalize/destroy of a split: %s / %s: %s", c.tag.c_str(), c.me,
              chorusGetErrorString(rc), chorusGetErrorString(rc2), chorusGetLastError(nullptr)));
  (void)run;
}

// A sub-communicator where one rank aborts: every other rank's next call must fail with
// chorusRemoteError naming it.
void abortEpisode(RankCtx& c, Runner& run, Rng& er, int epoch) {
  const int ncol = (c.n >= 4 && er.chance(0.5)) ? 2 : 1;
  std::vector<int> perm(size_t(c.n));
  for (int i = 0; i < c.n; ++i) perm[size_t(i)] = i;
  for (int i = c.n - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[er.below(size_t(i) + 1)]);
  std::vector<int> color(size_t(c.n)), key(size_t(c.n));
  for (int i = 0; i < c.n; ++i)
    color[size_t(perm[size_t(i)])] = (ncol == 2 && i >= c.n / 2) ? 1 : 0;
  for (int r = 0; r < c.n; ++r) key[size_t(r)] = int(er.below(4));
  std::vector<int> aborter(2);
  for (int col = 0; col < 2; ++col)
    aborter[size_t(col)] = int(er.below(membersOf(color, key, col).size()));
  int sr = -1, sn = 0;
  chorusComm_t sub = doSplit(c, color, key, &sr, &sn);
  const int mine = color[size_t(c.me)];
  Rng r(mix(c.seed, uint64_t(epoch), 0xAB0 + uint64_t(mine)));
  Runner sruns(sub, sr, sn, c.stream, c.pr.o.maxBytes, c.tag + fmt("/abort%d.%d", epoch, mine),
               c.hb);
  Fail f;
  if (!sruns.steps(r, int(r.below(4)), &f))
    fatal(c.pr, c.world,
          fmt("%s rank %d (sub rank %d/%d, epoch %d, before the abort): %s: %s: %s", c.tag.c_str(),
              c.me, sr, sn, epoch, sruns.lastOp().c_str(), chorusGetErrorString(f.rc),
              f.msg.c_str()));
  worldBarrier(c, run, er);  // every sub operation is complete everywhere
  const int ab = aborter[size_t(mine)];
  if (sr == ab) {
    const chorusResult_t rc = chorusCommAbort(sub);
    gc.aborts++;
    if (rc != chorusSuccess)
      bad(fmt("%s rank %d: chorusCommAbort: %s", c.tag.c_str(), c.me, chorusGetErrorString(rc)));
  } else {
    const OpDesc d = drawAllInputOp(r, sn);
    Prepared p = prepare(d, sr, sn);
    const double t0 = now();
    const chorusResult_t rc = issue(p, sub, nullptr);
    const double dt = now() - t0;
    c.hb->store(now());
    gc.abortChecks++;
    const std::string msg = chorusGetLastError(sub);
    const std::string where = fmt("%s rank %d (sub rank %d/%d, epoch %d, sub rank %d aborted)",
                                  c.tag.c_str(), c.me, sr, sn, epoch, ab);
    if (rc == chorusSuccess) {
      bad(where + ": " + d.describe() + " succeeded");
    } else {
      chorusResult_t ae = chorusSuccess;
      chorusCommGetAsyncError(sub, &ae);
      if (rc != chorusRemoteError || blamedRank(msg) != ab || ae == chorusSuccess || dt > 10)
        bad(fmt("%s: %s returned %s after %.2f s (async %s): %s", where.c_str(),
                d.describe().c_str(), chorusGetErrorString(rc), dt, chorusGetErrorString(ae),
                msg.c_str()));
    }
    const chorusResult_t rc2 = (sr % 2) ? chorusCommAbort(sub) : chorusCommDestroy(sub);
    if (rc2 != chorusSuccess)
      bad(where + ": abort/destroy after the failure: " + chorusGetErrorString(rc2));
  }
  worldBarrier(c, run, er);
}

void worldThread(Proc& pr, int t) {
  pr.hb[t].store(now());
  if (t == 0) {
    // The library's process-wide status-signal watcher (a thread and a pipe, created with the
    // first communicator, kept for the life of the process) exists before the baseline.
    chorusComm_t one = nullptr;
    if (chorusCommInitAll(&one, 1, nullptr) == chorusSuccess) chorusCommDestroy(one);
  }
  checkpoint(pr, t, &pr.base);
  Fail f;
  chorusComm_t world = nullptr;
  if (!initRank(pr, t, &world, &f))
    fatal(pr, nullptr,
          fmt("world init (thread %d): %s: %s", t, chorusGetErrorString(f.rc), f.msg.c_str()));
  pr.worlds[t] = world;
  int me = -1, n = -1;
  chorusCommUserRank(world, &me);
  chorusCommCount(world, &n);
  if (n != pr.P * pr.T || me != pr.p * pr.T + t)
    bad(fmt("world rank %d of %d, expected %d of %d", me, n, pr.p * pr.T + t, pr.P * pr.T));
  chorusStream_t stream = nullptr;
  if (chorusStreamCreate(&stream) != chorusSuccess) fatal(pr, world, "chorusStreamCreate failed");
  RankCtx c{pr, t, me, n, world, stream, pr.o.seed, &pr.hb[t], fmt("world%d", n)};
  Runner run(world, me, n, stream, pr.o.maxBytes, c.tag, c.hb);
  const double deadline = now() + pr.o.seconds;
  const int warmEpochs = 3;
  double lastProgress = now();
  int epoch = 0;
  for (;; ++epoch) {
    // Stop together: a MAX over "my time is up".
    int32_t stop = now() > deadline ? 1 : 0;
    if (chorusAllReduce(&stop, &stop, 1, chorusInt32, chorusMax, world, nullptr) != chorusSuccess)
      fatal(pr, world, fmt("rank %d: stop vote: %s", me, chorusGetLastError(world)));
    c.hb->store(now());
    if (stop) break;
    if (epoch == warmEpochs) {
      checkpoint(pr, t, &pr.warm);
      if (t == 0) pr.warmTaken = true;
    }
    gc.epochs++;
    Rng er(mix(pr.o.seed, 0xE90C, uint64_t(epoch)));
    if (epoch == 0) {
      // Warm-up: every collective once at the largest size, so that what the library keeps
      // for big operations exists before the checkpoint.
      for (int k = 0; k < kNumColl; ++k) {
        const OpDesc d = makeOp(er, Coll(k), n, pr.o.maxBytes);
        if (!run.run({d}, k % 2 ? stream : nullptr, false, 1, &f) || !run.flush(&f))
          fatal(pr, world,
                fmt("%s rank %d: warm-up %s: %s: %s", c.tag.c_str(), me, d.describe().c_str(),
                    chorusGetErrorString(f.rc), f.msg.c_str()));
      }
      // A communicator starts its channel workers (chorus-ch<k>, one thread per extra channel)
      // on its first call that runs on more than one channel (src/algo/channel_workers.h):
      // one such call too, at the first size the tuner runs on several channels, so that they
      // exist before the checkpoint (a run that drew such a call only later ended with one
      // more thread per rank than the checkpoint). The choice is the same on every rank.
      static const char* const kTunerKey[kSendRecv] = {"allreduce", "broadcast",     "reduce",
                                                       "allgather", "reducescatter", "alltoall",
                                                       "gather",    "scatter"};
      bool multi = false;
      for (size_t bytes = 4096; bytes <= pr.o.maxBytes && !multi; bytes *= 2)
        for (int k = 0; k < kSendRecv && !multi; ++k) {
          const OpDesc d = makeOp(er, Coll(k), n, bytes);
          chorusChoice_t ch{};
          if (chorusTunerChoice(world, kTunerKey[k], d.count, d.type, &ch) != chorusSuccess ||
              ch.nchannels < 2)
            continue;
          multi = true;
          if (!run.run({d}, nullptr, false, 1, &f) || !run.flush(&f))
            fatal(
                pr, world,
                fmt("%s rank %d: warm-up on %d channels %s: %s: %s", c.tag.c_str(), me,
                    ch.nchannels, d.describe().c_str(), chorusGetErrorString(f.rc), f.msg.c_str()));
        }
    } else {
      const size_t u = er.below(100);
      if (u < 55) {
        if (!run.steps(er, 3 + int(er.below(10)), &f))
          fatal(pr, world,
                fmt("%s rank %d epoch %d: %s: %s: %s", c.tag.c_str(), me, epoch,
                    run.lastOp().c_str(), chorusGetErrorString(f.rc), f.msg.c_str()));
      } else if (u < 78) {
        splitEpisode(c, run, er, epoch);
      } else if (u < 90 && n >= 2) {
        abortEpisode(c, run, er, epoch);
      } else {
        // A stream of its own for a few operations, then destroyed.
        chorusStream_t s2 = nullptr;
        if (chorusStreamCreate(&s2) != chorusSuccess) fatal(pr, world, "chorusStreamCreate failed");
        gc.tempStreams++;
        run.setStream(s2);
        if (!run.steps(er, 2 + int(er.below(6)), &f))
          fatal(pr, world,
                fmt("%s rank %d epoch %d: %s: %s: %s", c.tag.c_str(), me, epoch,
                    run.lastOp().c_str(), chorusGetErrorString(f.rc), f.msg.c_str()));
        run.setStream(stream);
        if (chorusStreamDestroy(s2) != chorusSuccess) bad("chorusStreamDestroy failed");
      }
    }
    if (me == 0 && now() - lastProgress > 60) {
      lastProgress = now();
      say(fmt("SOAK-PROGRESS %s epoch %d ops %" PRIu64 " wrong %" PRIu64 " %.0f s left",
              c.tag.c_str(), epoch, gc.ops.load(), gc.wrong.load(), deadline - now()));
    }
  }
  if (!pr.warmTaken) checkpoint(pr, t, &pr.warm);  // a run too short for warm-up
  checkpoint(pr, t, &pr.end, &pr.warm);
  pr.worlds[t] = nullptr;
  if (chorusStreamDestroy(stream) != chorusSuccess) bad("chorusStreamDestroy failed");
  if (chorusCommDestroy(world) != chorusSuccess) bad("world chorusCommDestroy failed");
  checkpoint(pr, t, &pr.after, &pr.base);
}

// A kill job's rank: random operations until one fails (the driver kills part of the job).
void jobThread(Proc& pr, int t) {
  pr.hb[t].store(now());
  pr.bar->arrive_and_wait();
  Fail f;
  chorusComm_t comm = nullptr;
  const double t0 = now();
  if (!initRank(pr, t, &comm, &f)) {
    say(fmt("SOAKERR rank=%d phase=init rc=%d t=%.3f msg=%s", pr.p * pr.T + t, int(f.rc),
            now() - t0, f.msg.c_str()));
    pr.threadsWithError++;
    return;
  }
  int me = -1, n = -1;
  chorusCommUserRank(comm, &me);
  chorusCommCount(comm, &n);
  say(fmt("SOAKINIT rank=%d", me));  // the driver tells kills during init from later ones
  chorusStream_t stream = nullptr;
  chorusStreamCreate(&stream);
  Runner run(comm, me, n, stream, pr.o.maxBytes, fmt("job%d", n), &pr.hb[t]);
  const double deadline = now() + pr.o.seconds;
  bool failed = false;
  for (int epoch = 0; now() < deadline && !failed; ++epoch) {
    Rng er(mix(pr.o.seed, 0x10B, uint64_t(epoch)));
    failed = !run.steps(er, 1 + int(er.below(6)), &f);
  }
  if (failed) {
    say(fmt("SOAKERR rank=%d phase=run rc=%d how=%s t=%.3f msg=%s", me, int(f.rc), f.how,
            now() - t0, f.msg.c_str()));
    pr.threadsWithError++;
    chorusCommAbort(comm);
  } else {
    chorusCommDestroy(comm);
  }
  chorusStreamDestroy(stream);
}

void watchdog(Proc& pr, int hangSec) {
  while (!pr.done.load()) {
    for (int i = 0; i < 10 && !pr.done.load(); ++i) usleep(100000);
    for (int t = 0; t < pr.T; ++t) {
      const double idle = now() - pr.hb[t].load();
      if (idle > hangSec) {
        say(fmt("SOAK-HANG process %d thread %d: no progress for %.0f s (seed %" PRIu64
                "); status reports follow",
                pr.p, t, idle, pr.o.seed));
        for (int k = 0; k < pr.T; ++k)
          if (chorusComm_t w = pr.worlds[k].load()) chorusCommPrintStatus(w);
        fflush(stdout);
        fflush(stderr);
        _exit(3);
      }
    }
  }
}

std::string resLine(const char* name, long Res::*f, const Proc& pr) {
  return fmt("%s=%ld/%ld/%ld/%ld", name, pr.base.*f, pr.warm.*f, pr.end.*f, pr.after.*f);
}

int rankMain(Options& o, bool job) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A fixed mmap threshold: glibc's dynamic one would keep freed blocks of up to 32 MiB in the
  // heap after the first large free, and RSS would then measure the allocator, not leaks.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  if (o.parent > 0 && getppid() != o.parent) return 9;
  Proc pr;
  pr.o = o;
  pr.T = o.threads;
  pr.P = o.procs;
  const char* r = getenv("CHORUS_RANK");
  pr.p = r ? atoi(r) : 0;
  pr.launcher = job || pr.P > 1 || r != nullptr;
  pr.bar = std::make_unique<std::barrier<>>(pr.T);
  pr.hb = std::make_unique<std::atomic<double>[]>(size_t(pr.T));
  pr.worlds = std::make_unique<std::atomic<chorusComm_t>[]>(size_t(pr.T));
  for (int t = 0; t < pr.T; ++t) {
    pr.hb[t].store(now());
    pr.worlds[t].store(nullptr);
  }
  const int hangSec = o.hang > 0 ? o.hang : (job ? 60 : o.timeout + 90);
  std::thread wd(watchdog, std::ref(pr), hangSec);
  std::vector<std::thread> ts;
  for (int t = 0; t < pr.T; ++t) ts.emplace_back(job ? jobThread : worldThread, std::ref(pr), t);
  for (auto& th : ts) th.join();
  pr.done = true;
  wd.join();
  if (job) {
    say(fmt("SOAKJOB proc=%d ops=%" PRIu64 " wrong=%" PRIu64 " errors=%d", pr.p, gc.ops.load(),
            gc.wrong.load(), pr.threadsWithError.load()));
    if (gc.wrong) return 2;
    return pr.threadsWithError == pr.T ? 0 : 5;
  }
  // Leaks: the end against the warm-up checkpoint, and after destroying everything against
  // the start.
  std::string why;
  if (pr.end.fds != pr.warm.fds) why += " fds";
  if (pr.end.threads != pr.warm.threads) why += " threads";
  if (pr.end.shmOwn != pr.warm.shmOwn) why += " shm";
  if (double(pr.end.rssKb - pr.warm.rssKb) > o.rssSlackMb * 1024) why += " rss";
  if (pr.after.fds != pr.base.fds) why += " fds-after-destroy";
  if (pr.after.threads != pr.base.threads) why += " threads-after-destroy";
  if (pr.after.shmOwn != 0) why += " shm-after-destroy";
  if (!why.empty()) say("SOAKRES " + describeRes());
  if (gc.wrong) why += " wrong-results";
  if (gc.bad) why += " checks";
  std::string colls;
  for (int k = 0; k < kNumColl; ++k)
    colls += fmt("%s%s:%" PRIu64, k ? "," : "", collName(k), gc.coll[k].load());
  say(fmt("SOAKSUM proc=%d/%d threads=%d ops=%" PRIu64 " wrong=%" PRIu64 " bad=%" PRIu64
          " epochs=%" PRIu64 " groups=%" PRIu64 " inplace=%" PRIu64 " streamops=%" PRIu64
          " zero=%" PRIu64 " large=%" PRIu64 " gib=%.1f splits=%" PRIu64 " nocolor=%" PRIu64
          " finalizes=%" PRIu64 " aborts=%" PRIu64 " abortchecks=%" PRIu64 " tempstreams=%" PRIu64
          " colls=%s %s %s %s %s shm_all=%ld/%ld/%ld/%ld result=%s",
          pr.p, pr.P, pr.T, gc.ops.load(), gc.wrong.load(), gc.bad.load(), gc.epochs.load(),
          gc.groups.load(), gc.inPlace.load(), gc.streamOps.load(), gc.zero.load(), gc.large.load(),
          double(gc.bytes.load()) / double(1 << 30), gc.splits.load(), gc.noColor.load(),
          gc.finalizes.load(), gc.aborts.load(), gc.abortChecks.load(), gc.tempStreams.load(),
          colls.c_str(), resLine("fd", &Res::fds, pr).c_str(),
          resLine("threads", &Res::threads, pr).c_str(), resLine("rss_kb", &Res::rssKb, pr).c_str(),
          resLine("shm", &Res::shmOwn, pr).c_str(), pr.base.shmAll, pr.warm.shmAll, pr.end.shmAll,
          pr.after.shmAll, why.empty() ? "ok" : ("FAIL:" + why).c_str()));
  return why.empty() ? 0 : 2;
}

// ------------------------------------------------------------------------------------------
// Driver.
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

std::string selfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "chorus-soak";
  buf[n] = 0;
  return buf;
}

// posix_spawn with stdout and stderr into `out`; pgroup: 0 its own group, > 0 join that one.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& out, pid_t pgroup) {
  std::set<std::string> names;
  for (const std::string& e : env) names.insert(e.substr(0, e.find('=')));
  for (const char* v :
       {"CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_COMM_ID", "CHORUS_SECRET", "CHORUS_HOSTID"})
    names.insert(v);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    if (!names.count(s.substr(0, s.find('=')))) envs.push_back(s);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> av, ev;
  for (const std::string& s : argv) av.push_back(const_cast<char*>(s.c_str()));
  av.push_back(nullptr);
  for (const std::string& s : envs) ev.push_back(const_cast<char*>(s.c_str()));
  ev.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, pgroup);
  pid_t pid = -1;
  const int e = posix_spawn(&pid, av[0], &fa, &at, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (e != 0) {
    say(fmt("chorus-soak: posix_spawn %s: %s", av[0], strerror(e)));
    return -1;
  }
  return pid;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, size_t lines) {
  if (s.empty()) return s;
  size_t pos = s.size();
  for (size_t k = 0; k <= lines && pos > 0; ++k) {
    const size_t q = s.rfind('\n', pos - 1);
    if (q == std::string::npos) return s;
    pos = q;
  }
  return s.substr(pos + 1);
}

std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream ls(line);
  std::string kv;
  while (ls >> kv) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) f[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const size_t m = line.find(" msg=");
  if (m != std::string::npos) f["msg"] = line.substr(m + 5);
  return f;
}

std::string secretFor(uint64_t x) {
  std::string s;
  for (int i = 0; i < 32; ++i) s += "0123456789abcdef"[mix(x, uint64_t(i)) % 16];
  return s;
}

// Waits for pid until `until` (monotonic); -1 when still running (not reaped).
int waitUntil(pid_t pid, double until) {
  for (;;) {
    int st = 0;
    const pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (w < 0) return -3;
    if (now() >= until) return -1;
    usleep(5000);
  }
}

struct Totals {
  uint64_t jobs = 0, kills = 0, killedProcs = 0, killedRanks = 0, reports = 0, blameOk = 0,
           initKills = 0, jobOps = 0, jobWrong = 0, failures = 0, hangs = 0, leftovers = 0;
  uint64_t initPhaseJobs = 0, initPhaseOther = 0;
  double maxDetect = 0, maxDetectInit = 0;
  std::set<pid_t> pids;
};

void failNote(Totals& tt, const std::string& what) {
  tt.failures++;
  say("SOAK-FAILURE " + what);
}

// One job of P processes x T threads; the driver SIGKILLs one or two of its processes (as one
// process group) and checks that every survivor fails naming a killed rank, and exits.
void runJob(const Options& o, Totals& tt, uint64_t jseed, int j, const std::string& dir,
            const std::string& modeName) {
  Rng jr(jseed);
  const int P = 2 + int(jr.below(3)), T = jr.chance(0.35) ? 2 : 1;
  const int nodes = jr.chance(0.4) ? 2 : 1;
  const int nv = (P >= 3 && jr.chance(0.25)) ? 2 : 1;
  std::vector<int> procs(static_cast<size_t>(P));
  for (int i = 0; i < P; ++i) procs[size_t(i)] = i;
  for (int i = P - 1; i > 0; --i) std::swap(procs[size_t(i)], procs[jr.below(size_t(i) + 1)]);
  std::set<int> victims(procs.begin(), procs.begin() + nv);
  const double delay = 0.05 + double(jr.below(2500)) / 1000.0;
  const uint64_t rankSeed = jr.next();
  const int port = freePort();
  const std::string secret = secretFor(jseed);
  std::vector<pid_t> pids(static_cast<size_t>(P), -1);
  std::vector<std::string> logs(static_cast<size_t>(P));
  pid_t vgroup = 0;
  for (int p = 0; p < P; ++p) {
    logs[size_t(p)] = fmt("%s/%s-job%d-p%d.log", dir.c_str(), modeName.c_str(), j, p);
    std::vector<std::string> argv = {selfPath(),
                                     "--role",
                                     "job",
                                     "--procs",
                                     fmt("%d", P),
                                     "--threads",
                                     fmt("%d", T),
                                     "--seed",
                                     fmt("%" PRIu64, rankSeed),
                                     "--seconds",
                                     "120",
                                     "--max-bytes",
                                     fmt("%zu", o.jobMaxBytes),
                                     "--parent",
                                     fmt("%d", int(getpid()))};
    if (o.quarantine) argv.push_back("--quarantine-failed");
    std::vector<std::string> env = {
        fmt("CHORUS_RANK=%d", p),
        fmt("CHORUS_NRANKS=%d", P),
        fmt("CHORUS_COMM_ID=127.0.0.1:%d", port),
        "CHORUS_SECRET=" + secret,
        fmt("CHORUS_HOSTID=soak%d-job%d-node%d", int(getpid()), j, p * nodes / P),
        "CHORUS_TIMEOUT=30",
        "CHORUS_BOOTSTRAP_TIMEOUT=20"};
    const bool v = victims.count(p) > 0;
    pids[size_t(p)] = spawn(argv, env, logs[size_t(p)], v ? vgroup : 0);
    if (v && vgroup == 0) vgroup = pids[size_t(p)];
    tt.pids.insert(pids[size_t(p)]);
  }
  std::set<int> victimRanks;
  std::string vr;
  for (int p : victims)
    for (int t = 0; t < T; ++t) {
      victimRanks.insert(p * T + t);
      vr += fmt("%s%d", vr.empty() ? "" : ",", p * T + t);
    }
  const std::string what =
      fmt("%s job %d (%dx%d ranks, %d node%s, seed %" PRIu64 ", kill ranks %s after %.2f s)",
          modeName.c_str(), j, P, T, nodes, nodes > 1 ? "s" : "", rankSeed, vr.c_str(), delay);
  // Wait for the moment, or for a victim that ended on its own.
  const double t0 = now();
  bool ended = false;
  while (now() - t0 < delay && !ended) {
    usleep(5000);
    for (int p : victims) {
      int st;
      if (waitpid(pids[size_t(p)], &st, WNOHANG) == pids[size_t(p)]) {
        ended = true;
        pids[size_t(p)] = -1;
      }
    }
  }
  bool ok = true;
  if (ended) {
    failNote(tt, what + ": a victim ended before the kill");
    ok = false;
  }
  kill(-vgroup, SIGKILL);
  const double tKill = now();
  tt.jobs++;
  tt.kills++;
  tt.killedProcs += uint64_t(nv);
  tt.killedRanks += victimRanks.size();
  for (int p : victims)
    if (pids[size_t(p)] > 0) waitUntil(pids[size_t(p)], now() + 10);
  // Did every killed rank finish its init? If not, the kill landed during init: the survivors
  // must still fail and exit in time, but whom they blame is counted, not checked (a rank that
  // finished init may wait for one still in it; tools/soak/README.md, "Findings").
  int victimsReady = 0;
  for (int p : victims) {
    const std::string out = readFile(logs[size_t(p)]);
    for (size_t at = out.find("SOAKINIT "); at != std::string::npos;
         at = out.find("SOAKINIT ", at + 1))
      ++victimsReady;
  }
  const bool duringInit = victimsReady < nv * T;
  if (duringInit) tt.initPhaseJobs++;
  double lastExit = 0;
  for (int p = 0; p < P; ++p) {
    if (victims.count(p)) continue;
    const int st = waitUntil(pids[size_t(p)], tKill + 60);
    if (st == -1) {
      kill(pids[size_t(p)], SIGKILL);
      waitUntil(pids[size_t(p)], now() + 10);
      tt.hangs++;
      failNote(tt,
               fmt("%s: survivor process %d still running 60 s after the kill", what.c_str(), p));
      ok = false;
      continue;
    }
    lastExit = std::max(lastExit, now() - tKill);
    const std::string out = readFile(logs[size_t(p)]);
    int errors = 0;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("SOAKJOB ", 0) == 0) {
        auto f = fields(line);
        tt.jobOps += std::stoull(f["ops"]);
        tt.jobWrong += std::stoull(f["wrong"]);
      }
      if (line.rfind("SOAKERR ", 0) != 0) continue;
      ++errors;
      tt.reports++;
      auto f = fields(line);
      if (f["phase"] == "init") {
        tt.initKills++;
        continue;
      }
      const int blamed = blamedRank(f["msg"]);
      if (duringInit) {
        if (victimRanks.count(blamed))
          tt.blameOk++;
        else
          tt.initPhaseOther++;
        continue;
      }
      if (f["rc"] != fmt("%d", int(chorusRemoteError)) || !victimRanks.count(blamed)) {
        failNote(tt, fmt("%s: %s", what.c_str(), line.c_str()));
        ok = false;
      } else {
        tt.blameOk++;
      }
    }
    if (st != 0 || errors != T) {
      failNote(tt, fmt("%s: survivor process %d exited %d with %d error reports of %d",
                       what.c_str(), p, st, errors, T));
      ok = false;
    }
  }
  if (duringInit)
    tt.maxDetectInit = std::max(tt.maxDetectInit, lastExit);
  else
    tt.maxDetect = std::max(tt.maxDetect, lastExit);
  // Nothing of the job may stay in /dev/shm.
  for (pid_t pid : pids) {
    if (pid <= 0) continue;
    const auto left = shmNames(fmt("chorus-%d-", int(pid)));
    if (!left.empty()) {
      tt.leftovers += left.size();
      failNote(tt, fmt("%s: /dev/shm/%s left", what.c_str(), left[0].c_str()));
      ok = false;
    }
  }
  say(fmt("job %s: %s, survivors out %.2f s after the kill%s", what.c_str(), ok ? "ok" : "FAILED",
          lastExit, duringInit ? " (killed during init)" : ""));
  if (!ok) {
    for (int p = 0; p < P; ++p)
      say(fmt("---- %s (process %d)\n%s", logs[size_t(p)].c_str(), p,
              tail(readFile(logs[size_t(p)]), 30).c_str()));
  } else if (!o.keepLogs) {
    for (const std::string& l : logs) unlink(l.c_str());
  }
}

struct ModeResult {
  std::vector<std::string> sums;
};

void runMode(const Options& o, Totals& tt, const std::string& mode, double seconds, uint64_t seed,
             const std::string& dir, ModeResult& mr) {
  Rng r(seed);
  int P = 1, T = 1, nodes = 1;
  if (mode == "threads") {
    T = 4 + int(r.below(5));
  } else {
    static const int shapes[][2] = {{4, 1}, {5, 1}, {6, 1}, {8, 1}, {2, 2},
                                    {3, 2}, {4, 2}, {2, 3}, {2, 4}};
    const auto& s = shapes[r.below(sizeof(shapes) / sizeof(shapes[0]))];
    P = s[0];
    T = s[1];
    nodes = r.chance(0.5) ? 2 : 1;
  }
  const uint64_t wseed = r.next();
  say(
      fmt("chorus-soak: %s mode: %d process%s x %d thread%s = %d ranks, %d node%s, %.0f s, world "
          "seed %" PRIu64,
          mode.c_str(), P, P > 1 ? "es" : "", T, T > 1 ? "s" : "", P * T, nodes,
          nodes > 1 ? "s" : "", seconds, wseed));
  const int port = freePort();
  const std::string secret = secretFor(wseed);
  std::vector<pid_t> pids(static_cast<size_t>(P));
  std::vector<std::string> logs(static_cast<size_t>(P));
  const double start = now();
  for (int p = 0; p < P; ++p) {
    logs[size_t(p)] = fmt("%s/%s-world-p%d.log", dir.c_str(), mode.c_str(), p);
    std::vector<std::string> argv = {selfPath(),
                                     "--role",
                                     "world",
                                     "--procs",
                                     fmt("%d", P),
                                     "--threads",
                                     fmt("%d", T),
                                     "--seed",
                                     fmt("%" PRIu64, wseed),
                                     "--seconds",
                                     fmt("%.0f", seconds),
                                     "--max-bytes",
                                     fmt("%zu", o.maxBytes),
                                     "--timeout",
                                     fmt("%d", o.timeout),
                                     "--parent",
                                     fmt("%d", int(getpid())),
                                     "--rss-slack-mb",
                                     fmt("%.0f", o.rssSlackMb)};
    if (o.hang > 0) {
      argv.push_back("--hang");
      argv.push_back(fmt("%d", o.hang));
    }
    std::vector<std::string> env = {fmt("CHORUS_TIMEOUT=%d", o.timeout)};
    if (mode != "threads") {
      env.push_back(fmt("CHORUS_RANK=%d", p));
      env.push_back(fmt("CHORUS_NRANKS=%d", P));
      env.push_back(fmt("CHORUS_COMM_ID=127.0.0.1:%d", port));
      env.push_back("CHORUS_SECRET=" + secret);
      env.push_back(fmt("CHORUS_HOSTID=soak%d-world-node%d", int(getpid()), p * nodes / P));
    }
    pids[size_t(p)] = spawn(argv, env, logs[size_t(p)], 0);
    tt.pids.insert(pids[size_t(p)]);
  }
  // Kill jobs beside the world ranks until 25 s before their end.
  const double bound = start + seconds + o.timeout + 120;
  std::vector<int> status(static_cast<size_t>(P), -1);
  int running = P, j = 0;
  while (running > 0) {
    if (now() < start + seconds - 25) {
      runJob(o, tt, mix(seed, 0x10B5, uint64_t(j)), j, dir, mode);
      ++j;
    } else {
      usleep(50000);
    }
    for (int p = 0; p < P; ++p) {
      if (status[size_t(p)] != -1) continue;
      int st = 0;
      if (waitpid(pids[size_t(p)], &st, WNOHANG) == pids[size_t(p)]) {
        status[size_t(p)] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --running;
      }
    }
    if (now() > bound) {
      for (int p = 0; p < P; ++p)
        if (status[size_t(p)] == -1) {
          kill(pids[size_t(p)], SIGKILL);
          status[size_t(p)] = waitUntil(pids[size_t(p)], now() + 10);
          tt.hangs++;
          failNote(tt, fmt("%s world process %d still running %.0f s after its end", mode.c_str(),
                           p, now() - start - seconds));
        }
      running = 0;
    }
  }
  bool ok = true;
  for (int p = 0; p < P; ++p) {
    const std::string out = readFile(logs[size_t(p)]);
    std::istringstream in(out);
    std::string line, sum;
    while (std::getline(in, line))
      if (line.rfind("SOAKSUM ", 0) == 0) sum = line;
    if (!sum.empty()) {
      mr.sums.push_back(mode + " " + sum);
      say(mode + " " + sum);
    }
    if (status[size_t(p)] == 3) tt.hangs++;  // its watchdog found a rank without progress
    if (status[size_t(p)] != 0 || sum.empty() || sum.find("result=ok") == std::string::npos) {
      failNote(tt, fmt("%s world process %d exited %d", mode.c_str(), p, status[size_t(p)]));
      ok = false;
    }
    if (out.find("SOAK-WRONG") != std::string::npos || out.find("SOAK-BAD") != std::string::npos)
      ok = false;
  }
  if (!ok)
    for (int p = 0; p < P; ++p)
      say(fmt("---- %s (world process %d)\n%s", logs[size_t(p)].c_str(), p,
              tail(readFile(logs[size_t(p)]), 60).c_str()));
  else if (!o.keepLogs)
    for (const std::string& l : logs) unlink(l.c_str());
}

int driverMain(Options& o) {
  if (!o.seedGiven) o.seed = mix(uint64_t(time(nullptr)), uint64_t(getpid()));
  const std::string dir = fmt("/tmp/chorus-soak-%d", int(getpid()));
  mkdir(dir.c_str(), 0755);
  say(fmt("chorus-soak: seed %" PRIu64 " (reproduce: chorus-soak --seed %" PRIu64
          " --seconds %.0f --mode %s%s), logs in %s",
          o.seed, o.seed, o.seconds, o.mode.c_str(), o.quarantine ? " --quarantine-failed" : "",
          dir.c_str()));
  const Res d0 = sampleRes();
  const double t0 = now();
  Totals tt;
  ModeResult mr;
  std::vector<std::pair<std::string, double>> modes;
  if (o.mode == "both") {
    modes = {{"procs", o.seconds * 0.55}, {"threads", o.seconds * 0.45}};
  } else {
    modes = {{o.mode, o.seconds}};
  }
  // Each mode's share of the budget, less the tail of its last operations and teardown.
  for (size_t i = 0; i < modes.size(); ++i) {
    const double left = o.seconds - (now() - t0);
    const double share = std::max(10.0, std::min(modes[i].second, left) - 8);
    runMode(o, tt, modes[i].first, share, mix(o.seed, modes[i].first == "threads" ? 1 : 2), dir,
            mr);
  }
  const Res d1 = sampleRes();
  uint64_t leftovers = 0;
  for (pid_t pid : tt.pids) leftovers += shmNames(fmt("chorus-%d-", int(pid))).size();
  if (leftovers)
    failNote(tt, fmt("%" PRIu64 " /dev/shm names of the soak's processes left", leftovers));
  if (d1.fds != d0.fds) failNote(tt, fmt("driver fds %ld -> %ld", d0.fds, d1.fds));
  if (tt.jobWrong) failNote(tt, fmt("%" PRIu64 " wrong results in kill jobs", tt.jobWrong));
  // World totals over every rank process (an operation counts once per rank that called it).
  uint64_t ops = tt.jobOps, wrong = tt.jobWrong;
  std::map<std::string, uint64_t> sum, colls;
  long growFd = 0, growThreads = 0, growShm = 0, growRss = 0;
  for (const std::string& line : mr.sums) {
    auto f = fields(line);
    ops += std::stoull(f["ops"]);
    wrong += std::stoull(f["wrong"]);
    for (const char* k : {"splits", "nocolor", "finalizes", "aborts", "abortchecks", "groups",
                          "inplace", "streamops", "zero", "large", "tempstreams"})
      sum[k] += std::stoull(f[k]);
    std::istringstream cs(f["colls"]);
    std::string kv;
    while (std::getline(cs, kv, ',')) {
      const size_t c = kv.find(':');
      if (c != std::string::npos) colls[kv.substr(0, c)] += std::stoull(kv.substr(c + 1));
    }
    // base/warm/end/after: the growth is end - warm.
    auto growth = [&](const char* k) {
      long v[4] = {0, 0, 0, 0};
      sscanf(f[k].c_str(), "%ld/%ld/%ld/%ld", &v[0], &v[1], &v[2], &v[3]);
      return v[2] - v[1];
    };
    growFd = std::max(growFd, growth("fd"));
    growThreads = std::max(growThreads, growth("threads"));
    growShm = std::max(growShm, growth("shm"));
    growRss = std::max(growRss, growth("rss_kb"));
  }
  std::string per;
  for (const auto& [k, v] : colls)
    per += fmt("%s%s:%" PRIu64, per.empty() ? "" : ",", k.c_str(), v);
  std::string extra;
  for (const auto& [k, v] : sum) extra += fmt(" %s=%" PRIu64, k.c_str(), v);
  say(fmt("SOAK TOTALS rank_ops=%" PRIu64 " wrong=%" PRIu64 "%s colls=%s max_growth_end_vs_warm: "
          "fd=%ld threads=%ld shm=%ld rss_kb=%ld",
          ops, wrong, extra.c_str(), per.c_str(), growFd, growThreads, growShm, growRss));
  say(fmt("SOAK SUMMARY seed=%" PRIu64 " seconds=%.0f ops=%" PRIu64 " (kill jobs %" PRIu64
          ") jobs=%" PRIu64 " killed_procs=%" PRIu64 " killed_ranks=%" PRIu64
          " survivor_reports=%" PRIu64 " named_killed=%" PRIu64 " init_kills=%" PRIu64
          " max_survivor_exit_s=%.2f init_phase_jobs=%" PRIu64 " init_phase_blamed_other=%" PRIu64
          " init_phase_max_exit_s=%.2f hangs=%" PRIu64 " shm_left=%" PRIu64
          " driver_fd=%ld/%ld shm_all=%ld/%ld failures=%" PRIu64 " -> %s",
          o.seed, now() - t0, ops, tt.jobOps, tt.jobs, tt.killedProcs, tt.killedRanks, tt.reports,
          tt.blameOk, tt.initKills, tt.maxDetect, tt.initPhaseJobs, tt.initPhaseOther,
          tt.maxDetectInit, tt.hangs, leftovers, d0.fds, d1.fds, d0.shmAll, d1.shmAll, tt.failures,
          tt.failures ? "FAIL" : "PASS"));
  if (tt.failures == 0 && !o.keepLogs) rmdir(dir.c_str());
  return tt.failures ? 1 : 0;
}

void usage() {
  fputs(
      "usage: chorus-soak [--seconds S] [--seed N] [--mode both|procs|threads]\n"
      "                   [--max-bytes B] [--timeout S] [--hang S] [--keep-logs]\n"
      "                   [--quarantine-failed]\n"
      "Random collectives on 4..8 ranks (processes, then threads) for S seconds (default 1800),\n"
      "with splits, aborts and SIGKILLed kill jobs; every result checked; exits 1 on any\n"
      "wrong result, hang, failed check or resource growth. See tools/soak/README.md.\n",
      stderr);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* s = getenv("SOAK_SECONDS")) o.seconds = atof(s);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        exit(64);
      }
      return argv[++i];
    };
    if (a == "--role")
      o.role = val();
    else if (a == "--mode")
      o.mode = val();
    else if (a == "--seconds")
      o.seconds = atof(val().c_str());
    else if (a == "--seed") {
      o.seed = strtoull(val().c_str(), nullptr, 10);
      o.seedGiven = true;
    } else if (a == "--procs")
      o.procs = atoi(val().c_str());
    else if (a == "--threads")
      o.threads = atoi(val().c_str());
    else if (a == "--max-bytes")
      o.maxBytes = size_t(strtoull(val().c_str(), nullptr, 10));
    else if (a == "--timeout")
      o.timeout = atoi(val().c_str());
    else if (a == "--hang")
      o.hang = atoi(val().c_str());
    else if (a == "--rss-slack-mb")
      o.rssSlackMb = atof(val().c_str());
    else if (a == "--parent")
      o.parent = pid_t(atoi(val().c_str()));
    else if (a == "--keep-logs")
      o.keepLogs = true;
    else if (a == "--quarantine-failed")
      o.quarantine = true;
    else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 64;
    }
  }
  if (o.role == "world") return rankMain(o, false);
  gQuarantine = o.quarantine;
  if (o.role == "job") return rankMain(o, true);
  if (o.mode != "both" && o.mode != "procs" && o.mode != "threads") {
    usage();
    return 64;
  }
  return driverMain(o);
}
