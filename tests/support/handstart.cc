#include "handstart.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "process.h"
#include "timing.h"

namespace ctest {

int freeLoopbackPort() {
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

namespace {
std::mutex logsMutex;
std::vector<std::string> logs;  // made by startRanksByHand, not yet taken
}  // namespace

std::vector<std::string> takeHandLogs() {
  std::lock_guard<std::mutex> lock(logsMutex);
  return std::exchange(logs, {});
}

std::string HandRank::output() const {
  std::ifstream in(outPath);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<HandRank> startRanksByHand(const std::string& program, int n, int nodes,
                                       const std::vector<std::string>& args, const std::string& tag,
                                       const std::vector<std::string>& extraEnv, bool interleaved) {
  const int port = freeLoopbackPort();
  std::vector<HandRank> ranks(static_cast<size_t>(n));
  char secret[33];
  for (int i = 0; i < 32; ++i) secret[i] = "0123456789abcdef"[(getpid() * 7 + i * 13 + port) % 16];
  secret[32] = 0;
  for (int r = 0; r < n; ++r) {
    HandRank& k = ranks[size_t(r)];
    k.outPath =
        "/tmp/chorus-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(r) + ".log";
    // An earlier run of the same test in this process (--gtest_repeat) left a log of this name:
    // gone before the child starts, or its lines would be read as this run's until the child
    // truncates it.
    unlink(k.outPath.c_str());
    {
      std::lock_guard<std::mutex> lock(logsMutex);
      logs.push_back(k.outPath);
    }
    // spawnProcess builds everything before fork(): the child only opens, dups and execs.
    SpawnSpec spec;
    spec.argv = {program};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = {
        "CHORUS_RANK=" + std::to_string(r), "CHORUS_NRANKS=" + std::to_string(n),
        "CHORUS_COMM_ID=127.0.0.1:" + std::to_string(port), std::string("CHORUS_SECRET=") + secret,
        "CHORUS_HOSTID=" + tag + "node" + std::to_string(interleaved ? r % nodes : r * nodes / n)};
    spec.env.insert(spec.env.end(), extraEnv.begin(), extraEnv.end());
    spec.out = ChildOutput::kFile;
    spec.outFile = k.outPath;
    k.pid = spawnProcess(spec).pid;
  }
  return ranks;
}

void waitRanksByHand(std::vector<HandRank>& ranks, double seconds) {
  const double until = nowSeconds() + seconds * timeoutScale();
  for (auto& k : ranks) k.status = waitProcess(k.pid, std::max(0.0, until - nowSeconds()));
}

std::map<std::string, std::string> fieldsOfLine(const std::string& out, const std::string& tag) {
  std::map<std::string, std::string> f;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(tag + " ", 0) != 0 && line != tag) continue;
    f.clear();
    f["_found"] = "1";
    std::istringstream ls(line.substr(tag.size()));
    std::string kv;
    while (ls >> kv) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) f[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return f;
}

}  // namespace ctest
