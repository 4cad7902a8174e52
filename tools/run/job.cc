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

extern char** environ;

#include "job.h"

namespace chorusrun {

std::optional<int> PickFreePort(std::string* err) {
  auto bindAny = [](int port, int* fd) {
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(uint16_t(port));
    socklen_t len = sizeof(addr);
    if (bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return -1;
    return int(ntohs(addr.sin_port));
  };
  for (int attempt = 0; attempt < 64; ++attempt) {
    int a = -1, b = -1;
    const int port = bindAny(0, &a);
    if (port < 0) {
      *err = std::string("bind 0.0.0.0:0: ") + std::strerror(errno);
      if (a >= 0) close(a);
      return std::nullopt;
    }
    const bool pair = port < 65535 && bindAny(port + 1, &b) == port + 1;
    close(a);
    if (b >= 0) close(b);
    if (pair) return port;
  }
  *err = "no free pair of consecutive TCP ports found in 64 tries";
  return std::nullopt;
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
  // Emulated nodes share this machine's cores: each node's ranks binding themselves to the
  // node's share of the cores (core/placement.cc) would stack every node's first rank on the
  // same core (4 x 2 ranks on 2 cores: an 8 B AllReduce 3.8 ms instead of 0.35). Unless the job
  // says otherwise (its environment or -x).
  if (opts.nnodes > 1 && std::getenv("CHORUS_BIND") == nullptr) SetEnv(env, "CHORUS_BIND", "none");
  for (const auto& [name, value] : opts.extra_env) SetEnv(env, name, value);
  return env;
}

}  // namespace chorusrun
