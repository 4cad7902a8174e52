// chorusrun: the local launcher for Chorus jobs (a tiny mpirun).
//
//   chorusrun [options] -np N PROGRAM [ARGS...]
//
// Starts N copies of PROGRAM on this machine, gives every rank the environment the Chorus bootstrap
// reads (CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK, CHORUS_LOCAL_NRANKS, CHORUS_COMM_ID,
// CHORUS_SECRET), relays the ranks' stdout/stderr line by line with a "[rank] " prefix, and tears
// the whole job down as soon as one rank fails.
//
// Process model:
//  * every rank is forked into one process group (the first rank leads it), so a single kill(-pgid)
//    reaches the ranks and whatever they started;
//  * every rank has PR_SET_PDEATHSIG=SIGKILL, so it dies if chorusrun dies;
//  * chorusrun is a child subreaper, so grandchildren orphaned by a rank are reaped here too;
//  * signals are turned into poll() wake-ups through a self-pipe; every wait has a deadline.
//
// Only libc, POSIX/Linux system calls and the C++ standard library are used.

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "netns.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kProg = "chorusrun";
// Exit status used when --timeout expires (same convention as timeout(1)).
constexpr int kTimeoutExit = 124;
// Exit status for usage errors.
constexpr int kUsageExit = 2;
// How long ranks get between the polite signal (SIGTERM/SIGINT) and SIGKILL.
constexpr auto kKillGrace = std::chrono::seconds(2);
// How long to keep draining output (and reaping stray grandchildren) after every rank has exited.
constexpr auto kDrainGrace = std::chrono::seconds(2);
// Bytes read from a rank's pipe per poll wake-up (keeps the relay fair between ranks).
constexpr size_t kReadChunk = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// Small helpers

// Writes all of iov[0..cnt) to fd. Returns false on a write error (e.g. EPIPE).
bool WriteFully(int fd, iovec* iov, int cnt) {
  while (cnt > 0) {
    while (cnt > 0 && iov->iov_len == 0) {
      ++iov;
      --cnt;
    }
    if (cnt == 0) break;
    ssize_t n = writev(fd, iov, std::min(cnt, IOV_MAX));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // The sink was left non-blocking by someone else: wait until it drains.
        pollfd p{fd, POLLOUT, 0};
        (void)poll(&p, 1, 1000);
        continue;
      }
      return false;
    }
    size_t left = static_cast<size_t>(n);
    while (cnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --cnt;
    }
    if (cnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// One of chorusrun's own output streams (fd 1 or 2). Once a write fails (say, stdout is a closed
// pipe) further output for it is discarded, but the job keeps running.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}
  void Write(std::vector<iovec>& iov) {
    if (broken_ || iov.empty()) return;
    if (!WriteFully(fd_, iov.data(), static_cast<int>(iov.size()))) broken_ = true;
  }
  void Write(std::string_view s) {
    std::vector<iovec> iov{{const_cast<char*>(s.data()), s.size()}};
    Write(iov);
  }

 private:
  int fd_;
  bool broken_ = false;
};

Sink g_stdout(STDOUT_FILENO);
Sink g_stderr(STDERR_FILENO);

// Prints "chorusrun: <msg>\n" to stderr as a single write.
void Message(const std::string& msg) {
  g_stderr.Write(std::string(kProg) + ": " + msg + "\n");
}

std::string SignalName(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGSYS, "SIGSYS"},
  };
  for (const auto& [num, name] : kNames) {
    if (num == sig) return name;
  }
  return "signal " + std::to_string(sig);
}

bool ParseInt(const char* s, long min, long max, long* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

bool ParseSeconds(const char* s, double* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e9) return false;
  *out = v;
  return true;
}

// Makes sure fds 0, 1 and 2 are open, so that pipes created later never land on them.
void EnsureStdFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int nfd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (nfd >= 0 && nfd != fd) {
        dup2(nfd, fd);
        close(nfd);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
  int nranks = 0;
  int nnodes = 0;               // --nodes Q: emulated nodes (0: not emulated)
  bool netns = false;           // --netns: a network namespace per emulated node
  std::string bindTo = "auto";  // --bind-to core|none|auto (auto: core when ranks <= cores)
  std::string linkRate;         // --link-rate RATE: tc shaping of every node's link
  bool prefix = true;
  std::optional<double> timeout_s;
  // -x NAME=VALUE; a -x NAME without '=' copies NAME from chorusrun's own environment.
  std::vector<std::pair<std::string, std::string>> extra_env;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

void PrintUsage(FILE* f) {
  std::fprintf(
      f,
      "Usage: %s [options] -np N PROGRAM [ARGS...]\n"
      "Start N local ranks of PROGRAM as one Chorus job.\n"
      "\n"
      "Options:\n"
      "  -np N, -n N      number of ranks to start (required, N >= 1)\n"
      "  --no-prefix      do not prefix the ranks' output lines with \"[rank] \"\n"
      "  --nodes Q        emulate Q nodes on this machine: ranks are split into Q contiguous\n"
      "                   blocks (the first N %% Q get one more rank), each with its own\n"
      "                   CHORUS_HOSTID, so they talk TCP between blocks\n"
      "  --bind-to B      core: pin rank i to core i mod cores; none; auto (default): core when\n"
      "                   the ranks fit the cores, as Open MPI does\n"
      "  --netns          with --nodes: each node in its own network namespace, joined by\n"
      "                   veth links to a bridge (needs root and iproute2; removed on exit)\n"
      "  --link-rate R    with --netns: shape each node's link to R in both directions\n"
      "                   (tc rate syntax, e.g. 1gbit)\n"
      "  --timeout SEC    kill every rank and exit 124 after SEC seconds\n"
      "  -x NAME=VALUE    set NAME=VALUE in every rank's environment (repeatable);\n"
      "                   -x NAME passes chorusrun's own value of NAME\n"
      "  -h, --help       show this help and exit\n"
      "Send chorusrun SIGUSR1 (CHORUS_STATUS_SIGNAL) to have every rank print its status\n"
      "report: the collective in flight, its sequence number, the peer it waits for and\n"
      "the last operations it completed.\n"
      "Options end at the first argument that is not an option (or after \"--\").\n"
      "\n"
      "Every rank gets CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK, CHORUS_LOCAL_NRANKS,\n"
      "CHORUS_COMM_ID (127.0.0.1:PORT, where rank 0 listens) and CHORUS_SECRET.\n"
      "\n"
      "Exit status: 0 when every rank exits 0; otherwise the status of the first rank\n"
      "that failed (128+SIG if it was killed by a signal), 124 on --timeout, 130/143 when\n"
      "chorusrun is interrupted by SIGINT/SIGTERM, 127 if PROGRAM is not found (126 if it\n"
      "cannot be executed), 2 for usage errors.\n",
      kProg);
}

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
  PrintUsage(stderr);
  std::exit(kUsageExit);
}

bool ValidEnvName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  });
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  bool have_np = false;
  int i = 1;
  // Returns the value of an option: the part after '=' in "--opt=value", else the next argument.
  auto value_of = [&](std::string_view opt, const char* inline_value) -> const char* {
    if (inline_value != nullptr) return inline_value;
    if (i + 1 >= argc) UsageError("option " + std::string(opt) + " needs an argument");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM
    std::string_view name = arg;
    const char* inline_value = nullptr;
    if (arg.starts_with("--")) {
      if (size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = argv[i] + eq + 1;
      }
    }
    if (name == "-h" || name == "--help") {
      PrintUsage(stdout);
      std::exit(0);
    } else if (name == "-np" || name == "-n" || name == "--np") {
      const char* v = value_of(name, inline_value);
      long n = 0;
      if (!ParseInt(v, 1, 1 << 20, &n)) {
        UsageError("invalid number of ranks '" + std::string(v) + "' (need an integer >= 1)");
      }
      o.nranks = static_cast<int>(n);
      have_np = true;
    } else if (name == "--nodes") {
      const char* v = value_of(name, inline_value);
      long q = 0;
      if (!ParseInt(v, 1, 1 << 20, &q)) {
        UsageError("invalid number of nodes '" + std::string(v) + "' (need an integer >= 1)");
      }
      o.nnodes = static_cast<int>(q);
    } else if (name == "--bind-to") {
      o.bindTo = value_of(name, inline_value);
      if (o.bindTo != "core" && o.bindTo != "none" && o.bindTo != "auto")
        UsageError("--bind-to takes core, none or auto");
    } else if (name == "--netns") {
      if (inline_value != nullptr) UsageError("option --netns takes no argument");
      o.netns = true;
    } else if (name == "--link-rate") {
      o.linkRate = value_of(name, inline_value);
    } else if (name == "--no-prefix") {
      if (inline_value != nullptr) UsageError("option --no-prefix takes no argument");
      o.prefix = false;
    } else if (name == "--timeout") {
      const char* v = value_of(name, inline_value);
      double t = 0;
      if (!ParseSeconds(v, &t)) {
        UsageError("invalid timeout '" + std::string(v) + "' (need a number of seconds > 0)");
      }
      o.timeout_s = t;
    } else if (name == "-x") {
      std::string_view v = value_of(name, inline_value);
      size_t eq = v.find('=');
      std::string env_name(v.substr(0, eq));
      if (!ValidEnvName(env_name)) {
        UsageError("invalid -x argument '" + std::string(v) + "' (need NAME=VALUE)");
      }
      if (eq == std::string_view::npos) {
        const char* cur = std::getenv(env_name.c_str());
        if (cur == nullptr) UsageError("-x " + env_name + ": " + env_name + " is not set");
        o.extra_env.emplace_back(env_name, cur);
      } else {
        o.extra_env.emplace_back(env_name, std::string(v.substr(eq + 1)));
      }
    } else {
      UsageError("unknown option '" + std::string(arg) + "'");
    }
  }
  if (!have_np) UsageError("missing -np N");
  if (o.nnodes > o.nranks) UsageError("--nodes cannot exceed the number of ranks");
  if (o.netns && o.nnodes == 0) UsageError("--netns needs --nodes Q");
  if (!o.linkRate.empty() && !o.netns) UsageError("--link-rate needs --netns");
  if (i >= argc) UsageError("missing PROGRAM");
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Job-wide rendezvous data and the per-rank environment

struct JobInfo {
  std::string comm_id;  // "127.0.0.1:PORT": where rank 0 listens
  std::string secret;   // 32 lowercase hex characters
};

// Finds a TCP port on 127.0.0.1 that is free right now (bind port 0, read it back, close).
// Rank 0 binds it later; another process could take it in between, which the bootstrap reports.
std::optional<int> PickFreePort(std::string* err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *err = std::string("bind 127.0.0.1:0: ") + std::strerror(errno);
    close(fd);
    return std::nullopt;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// 128 random bits as 32 lowercase hex characters (getrandom, falling back to /dev/urandom).
std::optional<std::string> RandomSecret(std::string* err) {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(bytes)) {
    got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < sizeof(bytes)) {
      ssize_t n = read(fd, bytes + got, sizeof(bytes) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (fd >= 0) close(fd);
    if (got < sizeof(bytes)) {
      *err = "cannot read random bytes from getrandom or /dev/urandom";
      return std::nullopt;
    }
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

// Where a rank sits in the job. Today every rank is on the one (real) node. An emulated
// "--nodes Q" option only has to change PlaceRank: split the ranks into Q blocks, set
// local_rank/local_nranks within the block and host_id = "node<k>" (exported as CHORUS_HOSTID).
struct RankPlacement {
  int node = 0;
  int rank = 0;
  int nranks = 1;
  int local_rank = 0;
  int local_nranks = 1;
  std::optional<std::string> host_id;  // CHORUS_HOSTID, when set
};

RankPlacement PlaceRank(const Options& opts, int rank) {
  RankPlacement p;
  p.rank = rank;
  p.nranks = opts.nranks;
  p.local_rank = rank;
  p.local_nranks = opts.nranks;
  if (opts.nnodes > 0) {
    // Contiguous blocks; the first N % Q nodes hold one rank more (e.g. 5 ranks on 2 nodes: 3+2).
    const int q = opts.nnodes, base = opts.nranks / q, extra = opts.nranks % q;
    int node = 0, first = 0;
    while (rank >= first + base + (node < extra ? 1 : 0)) first += base + (node++ < extra ? 1 : 0);
    p.local_rank = rank - first;
    p.local_nranks = base + (node < extra ? 1 : 0);
    p.host_id = "node" + std::to_string(node);
    p.node = node;
  }
  return p;
}

// Variables chorusrun owns: inherited values are dropped so that a nested or stale setting can
// never leak into a rank.
constexpr const char* kOwnedVars[] = {
    "CHORUS_RANK",    "CHORUS_NRANKS", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_NRANKS",
    "CHORUS_COMM_ID", "CHORUS_SECRET", "CHORUS_HOSTID",     "CHORUS_NNODES",
};

void SetEnv(std::vector<std::string>& env, std::string_view name, std::string_view value) {
  std::string entry = std::string(name) + "=" + std::string(value);
  for (auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      e = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

// The complete environment of one rank: chorusrun's environment minus the variables it owns,
// then the rank's Chorus variables, then the -x settings (which win).
std::vector<std::string> BuildRankEnv(const Options& opts, const JobInfo& job,
                                      const RankPlacement& p) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry = *e;
    std::string_view name = entry.substr(0, entry.find('='));
    bool owned = std::any_of(std::begin(kOwnedVars), std::end(kOwnedVars),
                             [&](const char* v) { return name == v; });
    if (!owned) env.emplace_back(entry);
  }
  SetEnv(env, "CHORUS_RANK", std::to_string(p.rank));
  SetEnv(env, "CHORUS_NRANKS", std::to_string(p.nranks));
  SetEnv(env, "CHORUS_LOCAL_RANK", std::to_string(p.local_rank));
  SetEnv(env, "CHORUS_LOCAL_NRANKS", std::to_string(p.local_nranks));
  SetEnv(env, "CHORUS_COMM_ID", job.comm_id);
  SetEnv(env, "CHORUS_SECRET", job.secret);
  if (p.host_id) SetEnv(env, "CHORUS_HOSTID", *p.host_id);
  if (opts.nnodes > 0) SetEnv(env, "CHORUS_NNODES", std::to_string(opts.nnodes));
  for (const auto& [name, value] : opts.extra_env) SetEnv(env, name, value);
  return env;
}

// ---------------------------------------------------------------------------------------------
// Signals: handlers only set a flag and poke the self-pipe that the main loop polls.

int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_got_signal[NSIG];

void OnSignal(int sig) {
  int saved = errno;
  if (sig > 0 && sig < NSIG) g_got_signal[sig] = 1;
  char c = 0;
  ssize_t r = write(g_wake_pipe[1], &c, 1);  // a full pipe already guarantees a wake-up
  (void)r;
  errno = saved;
}

// Signals chorusrun forwards to the ranks. SIGHUP is left alone when it was ignored at start
// (nohup): then it stays ignored for chorusrun and the ranks alike. SIGINT and SIGTERM are always
// caught, even in a background job of a non-interactive shell (where SIGINT starts out ignored).
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The status signal (docs/reliability.md "Status reports"): the ranks' CHORUS_STATUS_SIGNAL
// (USR1 by default, USR2, a number, or 0/none/off). chorusrun passes it on to every rank, each
// of which prints its status report; the ranks start with it ignored, so that one arriving
// before a rank's library installed its handler does no harm. 0: not handled.
int StatusSignal(const Options& opts) {
  const char* env = getenv("CHORUS_STATUS_SIGNAL");
  std::string v = env ? env : "";
  for (const auto& [name, value] : opts.extra_env)
    if (name == "CHORUS_STATUS_SIGNAL") v = value;
  for (char& ch : v) ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
  if (v.rfind("SIG", 0) == 0) v = v.substr(3);
  int sig = 0;
  if (v.empty() || v == "USR1") {
    sig = SIGUSR1;
  } else if (v == "USR2") {
    sig = SIGUSR2;
  } else {
    char* end = nullptr;
    const long n = strtol(v.c_str(), &end, 10);
    if (end != v.c_str() && *end == 0 && n > 0 && n < NSIG) sig = static_cast<int>(n);
  }
  for (int s : kForwardedSignals)
    if (sig == s) return 0;
  if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGPIPE) return 0;
  return sig;
}

// ---------------------------------------------------------------------------------------------
// Output relay

// One of a rank's output pipes: complete lines go to the sink, each with the rank's prefix.
struct Stream {
  int fd = -1;  // read end; -1 once closed
  Sink* sink = nullptr;
  std::string buf;     // bytes not written yet (at most one incomplete line after Emit)
  size_t scanned = 0;  // buf[0, scanned) holds no '\n'
};

class Launcher {
 public:
  Launcher(Options opts, JobInfo job, const chorusrun::EmulatedNet* net)
      : opts_(std::move(opts)), job_(std::move(job)), net_(net) {}
  int Run();

 private:
  struct Rank {
    int index = 0;
    pid_t pid = -1;
    bool reaped = false;
    std::string prefix;
    Stream out, err;
    int exec_err_fd = -1;  // CLOEXEC pipe: EOF means exec succeeded
  };
  // What a child reports through exec_err_fd when its setup or exec fails.
  struct ChildError {
    int stage;
    int err;
  };
  enum Stage : int { kSetpgid, kPdeathsig, kStdin, kDup2, kExec, kSetns };

  bool InstallSignalHandlers();
  bool Spawn(Rank& r, const sigset_t& child_mask);
  [[noreturn]] void ChildSetupAndExec(Rank& r, int out_w, int err_w, int err_pipe_w, char** envp,
                                      const sigset_t& child_mask, int netns_fd);
  void CollectExecErrors();
  void Loop();
  void HandleSignals();
  void Reap();
  void OnRankExit(Rank& r, int status);
  void Fail(int exit_code, int sig);
  void KillGroup(int sig);
  enum class PumpResult { kData, kAgain, kClosed };
  PumpResult Pump(const Rank& r, Stream& s);  // one read()
  void DrainNow(const Rank& r);
  void Emit(const Rank& r, Stream& s);
  void FlushPartial(const Rank& r, Stream& s);
  void CloseStream(const Rank& r, Stream& s);

  Options opts_;
  JobInfo job_;
  const chorusrun::EmulatedNet* net_;
  int bind_core_ = -1;  // the core the rank being started is pinned to (set before fork)
  std::vector<Rank> ranks_;
  std::vector<char*> argv_;  // opts_.command as execvp wants it
  pid_t parent_pid_ = 0;
  pid_t pgid_ = 0;  // 0 until the first rank is started
  std::unordered_map<pid_t, size_t> rank_of_pid_;
  int unreaped_ = 0;
  bool no_children_left_ = false;  // waitpid said ECHILD (also covers reparented grandchildren)
  std::vector<int> installed_signals_;
  int status_signal_ = 0;  // forwarded to every rank (StatusSignal)
  struct sigaction saved_sigpipe_ {};

  // Teardown state.
  bool terminating_ = false;
  bool killed_ = false;  // SIGKILL sent to the group
  int exit_code_ = 0;
  std::optional<Clock::time_point> timeout_deadline_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

bool Launcher::InstallSignalHandlers() {
  if (pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    Message(std::string("pipe: ") + std::strerror(errno));
    return false;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwardedSignals) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (sig == SIGHUP && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
    installed_signals_.push_back(sig);
  }
  status_signal_ = StatusSignal(opts_);
  if (status_signal_ != 0) {
    sigaction(status_signal_, &sa, nullptr);
    installed_signals_.push_back(status_signal_);
  }
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  installed_signals_.push_back(SIGCHLD);
  // A closed stdout must not kill the launcher (the Sink discards instead). Ranks get the
  // original disposition back.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &saved_sigpipe_);
  return true;
}

void Launcher::ChildSetupAndExec(Rank& r, int out_w, int err_w, int err_pipe_w, char** envp,
                                 const sigset_t& child_mask, int netns_fd) {
  auto fail = [&](int stage) {
    ChildError ce{stage, errno};
    ssize_t n = write(err_pipe_w, &ce, sizeof(ce));
    (void)n;
    _exit(stage == kExec && ce.err != ENOENT ? 126 : 127);  // the shell's conventions
  };
  // The first rank leads the job's process group; the others join it.
  if (setpgid(0, pgid_) != 0) fail(kSetpgid);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(kPdeathsig);
  // If chorusrun died before the prctl, the death signal will never come: give up now.
  if (getppid() != parent_pid_) _exit(127);
  // Default signal handling again, then unblock (pending SIGTERMs now act normally).
  for (int sig : installed_signals_) signal(sig, sig == status_signal_ ? SIG_IGN : SIG_DFL);
  sigaction(SIGPIPE, &saved_sigpipe_, nullptr);
  if (r.index != 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0) fail(kStdin);
    if (devnull != STDIN_FILENO) {
      if (dup2(devnull, STDIN_FILENO) < 0) fail(kStdin);
      close(devnull);
    }
  }
  // out_w/err_w are O_CLOEXEC and can't be 1 or 2 (EnsureStdFds), so dup2 yields inheritable fds.
  if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) fail(kDup2);
  if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) fail(kSetns);
  if (bind_core_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(bind_core_ + 0, &set);
    sched_setaffinity(0, sizeof(set), &set);  // best effort
  }
  sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  environ = envp;
  execvp(argv_[0], argv_.data());
  fail(kExec);
  _exit(127);
}

bool Launcher::Spawn(Rank& r, const sigset_t& child_mask) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, ep[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], ep[0], ep[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
    Message("cannot create pipes for rank " + std::to_string(r.index) + ": " +
            std::strerror(errno));
    close_all();
    return false;
  }
  // Everything the child needs is prepared before fork().
  const RankPlacement place = PlaceRank(opts_, r.index);
  bind_core_ = -1;
  {
    cpu_set_t avail;
    if (opts_.bindTo != "none" && sched_getaffinity(0, sizeof(avail), &avail) == 0) {
      const int cores = CPU_COUNT(&avail);
      if (opts_.bindTo == "core" || opts_.nranks <= cores) {
        int want = r.index % cores, seen = 0;
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &avail) && seen++ == want) {
            bind_core_ = c;
            break;
          }
      }
    }
  }
  std::vector<std::string> env = BuildRankEnv(opts_, job_, place);
  int netns_fd = -1;
  if (net_ != nullptr && net_->active()) {
    std::string path = "/var/run/netns/" + net_->nodeNamespace(place.node);
    netns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      Message("cannot open " + path + ": " + std::strerror(errno));
      close_all();
      return false;
    }
  }
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    Message("cannot start rank " + std::to_string(r.index) + ": fork: " + std::strerror(errno));
    close_all();
    return false;
  }
  if (pid == 0) ChildSetupAndExec(r, out[1], err[1], ep[1], envp.data(), child_mask, netns_fd);
  if (netns_fd >= 0) close(netns_fd);

  // Parent. Set the group here too, so it holds whichever of parent and child runs first.
  if (pgid_ == 0) pgid_ = pid;
  (void)setpgid(pid, pgid_);  // EACCES once the child has exec'd: it did it itself
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  r.pid = pid;
  r.out.fd = out[0];
  r.out.sink = &g_stdout;
  r.err.fd = err[0];
  r.err.sink = &g_stderr;
  r.exec_err_fd = ep[0];
  rank_of_pid_[pid] = static_cast<size_t>(r.index);
  ++unreaped_;
  return true;
}

// Waits for every started rank to either exec (its error pipe closes) or report why it could not.
void Launcher::CollectExecErrors() {
  for (auto& r : ranks_) {
    if (r.exec_err_fd < 0) continue;
    ChildError ce{};
    ssize_t n;
    do {
      n = read(r.exec_err_fd, &ce, sizeof(ce));
    } while (n < 0 && errno == EINTR);
    close(r.exec_err_fd);
    r.exec_err_fd = -1;
    if (n != static_cast<ssize_t>(sizeof(ce)) || terminating_) continue;
    if (ce.stage == kExec) {
      Message("cannot execute " + opts_.command[0] + ": " + std::strerror(ce.err));
      Fail(ce.err == ENOENT ? 127 : 126, SIGTERM);
    } else {
      static const char* const kStageNames[] = {"setpgid", "prctl", "stdin", "dup2"};
      Message("cannot set up rank " + std::to_string(r.index) + " (" + kStageNames[ce.stage] +
              "): " + std::strerror(ce.err));
      Fail(1, SIGTERM);
    }
  }
}

void Launcher::KillGroup(int sig) {
  if (pgid_ > 0) (void)kill(-pgid_, sig);
}

// Starts the teardown: records why (the exit status), sends `sig` to every process of the job and
// arms the SIGKILL deadline. Only the first cause counts.
void Launcher::Fail(int exit_code, int sig) {
  if (terminating_) return;
  terminating_ = true;
  exit_code_ = exit_code;
  KillGroup(sig);
  KillGroup(SIGCONT);  // stopped ranks must run to act on it
  kill_deadline_ = Clock::now() + kKillGrace;
}

// A rank that died may leave a shared-memory segment it created but had not unlinked yet
// (its peers remove it too when they notice; this is the launcher's safety net).
void RemoveShmOf(pid_t pid) {
  std::string prefix = "chorus-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
        shm_unlink((std::string("/") + e->d_name).c_str());
    closedir(d);
  }
}

void Launcher::OnRankExit(Rank& r, int status) {
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) RemoveShmOf(r.pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (terminating_) return;  // collateral damage of a teardown already under way
  std::string who = "rank " + std::to_string(r.index);
  if (WIFEXITED(status)) {
    Message(who + " exited with status " + std::to_string(WEXITSTATUS(status)));
    Fail(WEXITSTATUS(status), SIGTERM);
  } else if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    Message(who + " killed by signal " + SignalName(sig) +
            (WCOREDUMP(status) ? " (core dumped)" : ""));
    Fail(128 + sig, SIGTERM);
  }
}

void Launcher::Reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) return;
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) no_children_left_ = true;
      return;
    }
    auto it = rank_of_pid_.find(pid);
    if (it == rank_of_pid_.end()) continue;  // an orphaned grandchild (we are its subreaper)
    Rank& r = ranks_[it->second];
    rank_of_pid_.erase(it);
    r.reaped = true;
    --unreaped_;
    DrainNow(r);  // so the rank's last words come out before our verdict on it
    OnRankExit(r, status);
  }
}

void Launcher::HandleSignals() {
  char buf[64];
  while (read(g_wake_pipe[0], buf, sizeof(buf)) > 0) {
  }
  g_got_signal[SIGCHLD] = 0;  // Reap() runs on every iteration anyway
  if (status_signal_ != 0 && g_got_signal[status_signal_]) {
    g_got_signal[status_signal_] = 0;
    Message("received " + SignalName(status_signal_) + ", asking every rank for its status report");
    for (const Rank& r : ranks_)
      if (!r.reaped && r.pid > 0) (void)kill(r.pid, status_signal_);
  }
  for (int sig : kForwardedSignals) {
    if (!g_got_signal[sig]) continue;
    g_got_signal[sig] = 0;
    if (!terminating_) {
      Message("received " + SignalName(sig) + ", forwarding it to all ranks");
      Fail(128 + sig, sig);
    } else if (!killed_) {
      Message("received " + SignalName(sig) + " again, killing all ranks");
      KillGroup(SIGKILL);
      killed_ = true;
    }
  }
}

Launcher::PumpResult Launcher::Pump(const Rank& r, Stream& s) {
  // One shared read buffer: a stream only keeps (and allocates for) its unfinished line.
  static char chunk[kReadChunk];
  ssize_t n;
  do {
    n = read(s.fd, chunk, sizeof(chunk));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    s.buf.append(chunk, static_cast<size_t>(n));
    Emit(r, s);
    if (s.buf.empty() && s.buf.capacity() > 4 * kReadChunk) std::string().swap(s.buf);
    return PumpResult::kData;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PumpResult::kAgain;
  CloseStream(r, s);  // EOF (or a read error, which we treat the same)
  return PumpResult::kClosed;
}

// Reads what a just-exited rank left in its pipes. Bounded: a grandchild could keep writing.
void Launcher::DrainNow(const Rank& r) {
  Rank& rr = ranks_[static_cast<size_t>(r.index)];
  for (Stream* s : {&rr.out, &rr.err}) {
    for (int i = 0; i < 256 && s->fd >= 0; ++i) {
      if (Pump(rr, *s) != PumpResult::kData) break;
    }
  }
}

// Writes every complete line in s.buf, each preceded by the rank's prefix, in one writev batch.
void Launcher::Emit(const Rank& r, Stream& s) {
  char* data = s.buf.data();
  const size_t size = s.buf.size();
  const std::string& prefix = r.prefix;  // empty with --no-prefix
  std::vector<iovec> iov;
  size_t start = 0;
  size_t pos = s.scanned;
  while (pos < size) {
    const void* nl = std::memchr(data + pos, '\n', size - pos);
    if (nl == nullptr) break;
    size_t end = static_cast<size_t>(static_cast<const char*>(nl) - data) + 1;
    if (!prefix.empty()) {
      iov.push_back({const_cast<char*>(prefix.data()), prefix.size()});
      iov.push_back({data + start, end - start});
    } else if (iov.empty()) {
      iov.push_back({data + start, end - start});
    } else {
      iov.back().iov_len += end - start;  // unprefixed lines are contiguous: one iovec
    }
    start = pos = end;
  }
  if (start > 0) {
    s.sink->Write(iov);
    s.buf.erase(0, start);
  }
  s.scanned = s.buf.size();
}

// At EOF: an unterminated last line is written too. With a prefix it is completed with '\n' so
// the next line (maybe another rank's) starts on a line of its own; --no-prefix passes it as is.
void Launcher::FlushPartial(const Rank& r, Stream& s) {
  if (s.buf.empty()) return;
  static char newline[] = "\n";
  std::vector<iovec> iov;
  if (!r.prefix.empty()) iov.push_back({const_cast<char*>(r.prefix.data()), r.prefix.size()});
  iov.push_back({s.buf.data(), s.buf.size()});
  if (!r.prefix.empty()) iov.push_back({newline, 1});
  s.sink->Write(iov);
  s.buf.clear();
  s.scanned = 0;
}

void Launcher::CloseStream(const Rank& r, Stream& s) {
  FlushPartial(r, s);
  close(s.fd);
  s.fd = -1;
  std::string().swap(s.buf);
}

void Launcher::Loop() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<size_t, Stream*>> pstreams;  // pfds[i + 1] belongs to pstreams[i]
  for (;;) {
    HandleSignals();
    Reap();
    auto now = Clock::now();
    if (timeout_deadline_ && now >= *timeout_deadline_) {
      timeout_deadline_.reset();
      if (!terminating_) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%g", *opts_.timeout_s);
        Message(std::string("timeout after ") + buf + " s, terminating all ranks");
        Fail(kTimeoutExit, SIGTERM);
      }
    }
    if (terminating_ && !killed_ && unreaped_ > 0 && now >= *kill_deadline_) {
      Message("ranks still running " + std::to_string(kKillGrace.count()) +
              " s after SIGTERM, sending SIGKILL");
      KillGroup(SIGKILL);
      killed_ = true;
    }
    if (unreaped_ == 0) {
      if (!drain_deadline_) {
        // Every rank is gone: whatever is left in the job's process group is an orphan.
        KillGroup(SIGKILL);
        killed_ = true;
        drain_deadline_ = now + kDrainGrace;
      }
      bool streams_open = std::any_of(ranks_.begin(), ranks_.end(),
                                      [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
      if ((!streams_open && no_children_left_) || now >= *drain_deadline_) break;
    }

    // Sleep until output arrives, a signal comes in, or the nearest deadline.
    std::optional<Clock::time_point> wake;
    auto consider = [&](const std::optional<Clock::time_point>& t) {
      if (t && (!wake || *t < *wake)) wake = t;
    };
    consider(timeout_deadline_);
    if (terminating_ && !killed_) consider(kill_deadline_);
    consider(drain_deadline_);
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<decltype(ms)>(ms, 0, 60'000));
    }
    pfds.clear();
    pstreams.clear();
    pfds.push_back({g_wake_pipe[0], POLLIN, 0});
    for (size_t i = 0; i < ranks_.size(); ++i) {
      for (Stream* s : {&ranks_[i].out, &ranks_[i].err}) {
        if (s->fd < 0) continue;
        pfds.push_back({s->fd, POLLIN, 0});
        pstreams.emplace_back(i, s);
      }
    }
    int n = poll(pfds.data(), pfds.size(), timeout_ms);
    if (n < 0) {
      if (errno != EINTR && errno != EAGAIN) {
        Message(std::string("poll: ") + std::strerror(errno));
        Fail(1, SIGKILL);
        killed_ = true;
      }
      continue;
    }
    for (size_t i = 0; i < pstreams.size(); ++i) {
      if (pfds[i + 1].revents == 0) continue;
      auto [rank, s] = pstreams[i];
      if (s->fd >= 0) (void)Pump(ranks_[rank], *s);
    }
  }
}

int Launcher::Run() {
  parent_pid_ = getpid();
  // Orphaned grandchildren of the ranks get reparented here, so they are reaped before we exit.
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!InstallSignalHandlers()) return 1;
  for (auto& a : opts_.command) argv_.push_back(a.data());
  argv_.push_back(nullptr);

  // Handled signals stay blocked while children are forked: a child must not run our handlers
  // between fork() and exec(). It unblocks them (mask `orig`) once the defaults are back.
  sigset_t block, orig;
  sigemptyset(&block);
  for (int sig : installed_signals_) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &orig);

  if (opts_.timeout_s) {
    timeout_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(*opts_.timeout_s));
  }
  ranks_.resize(static_cast<size_t>(opts_.nranks));
  for (int i = 0; i < opts_.nranks; ++i) {
    ranks_[i].index = i;
    if (opts_.prefix) ranks_[i].prefix = "[" + std::to_string(i) + "] ";
  }
  for (auto& r : ranks_) {
    if (!Spawn(r, orig)) {
      Fail(1, SIGTERM);
      break;
    }
  }
  CollectExecErrors();
  sigprocmask(SIG_SETMASK, &orig, nullptr);

  Loop();
  return exit_code_;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = ParseOptions(argc, argv);
  EnsureStdFds();
  JobInfo job;
  std::string err;
  std::optional<int> port = PickFreePort(&err);
  if (!port) {
    Message("cannot pick a free TCP port: " + err);
    return 1;
  }
  job.comm_id = "127.0.0.1:" + std::to_string(*port);
  std::optional<std::string> secret = RandomSecret(&err);
  if (!secret) {
    Message(err);
    return 1;
  }
  job.secret = *secret;
  chorusrun::EmulatedNet net;
  if (opts.netns) {
    chorusrun::EmulatedNet::CleanupStale();
    if (!net.Setup(opts.nnodes, opts.linkRate, &err)) {
      Message("--netns: " + err);
      return 1;
    }
    // Rank 0 (node 0) listens on its namespace's address; a fresh namespace has every port free.
    job.comm_id = net.nodeAddress(0) + ":" + std::to_string(*port);
  }
  Launcher launcher(std::move(opts), std::move(job), &net);
  int rc = launcher.Run();
  net.Teardown();
  return rc;
}
