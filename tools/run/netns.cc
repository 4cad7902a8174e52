#include "netns.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace chorusrun {

namespace {

// Runs a command (no shell), output discarded; true when it exits 0.
bool Run(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string Join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

bool EmulatedNet::Setup(int nodes, const std::string& linkRate, int mtu, long burst,
                        std::string* err) {
  const std::string pid = std::to_string(getpid());
  switchNs_ = "chorus-" + pid + "-sw";
  std::vector<std::vector<std::string>> cmds;
  cmds.push_back({"ip", "netns", "add", switchNs_});
  cmds.push_back({"ip", "-n", switchNs_, "link", "set", "lo", "up"});
  cmds.push_back({"ip", "-n", switchNs_, "link", "add", "br0", "type", "bridge"});
  cmds.push_back({"ip", "-n", switchNs_, "link", "set", "br0", "up"});
  for (int k = 0; k < nodes; ++k) {
    const std::string ns = "chorus-" + pid + "-node" + std::to_string(k);
    const std::string vn = "v" + pid + "n" + std::to_string(k);  // <= 15 characters
    const std::string vs = "v" + pid + "s" + std::to_string(k);
    nodeNs_.push_back(ns);
    cmds.push_back({"ip", "netns", "add", ns});
    cmds.push_back({"ip", "-n", ns, "link", "set", "lo", "up"});
    cmds.push_back({"ip", "-n", ns, "link", "add", vn, "type", "veth", "peer", "name", vs, "netns",
                    switchNs_});
    if (mtu > 0) {  // both ends; the bridge follows its ports' smallest MTU
      cmds.push_back({"ip", "-n", ns, "link", "set", vn, "mtu", std::to_string(mtu)});
      cmds.push_back({"ip", "-n", switchNs_, "link", "set", vs, "mtu", std::to_string(mtu)});
    }
    cmds.push_back({"ip", "-n", ns, "addr", "add", nodeAddress(k) + "/24", "dev", vn});
    cmds.push_back({"ip", "-n", ns, "link", "set", vn, "up"});
    cmds.push_back({"ip", "-n", switchNs_, "link", "set", vs, "master", "br0"});
    cmds.push_back({"ip", "-n", switchNs_, "link", "set", vs, "up"});
    if (!linkRate.empty()) {
      // Token bucket on both ends: node -> switch and switch -> node.
      for (auto [n, dev] : {std::make_pair(ns, vn), std::make_pair(switchNs_, vs)})
        cmds.push_back({"tc", "-n", n, "qdisc", "add", "dev", dev, "root", "tbf", "rate", linkRate,
                        "burst", std::to_string(burst > 0 ? burst : kDefaultBurst) + "b", "latency",
                        "50ms"});
    }
  }
  for (const auto& c : cmds) {
    if (!Run(c)) {
      *err = "'" + Join(c) + "' failed (needs root and iproute2)";
      Teardown();
      return false;
    }
  }
  return true;
}

void EmulatedNet::Teardown() {
  for (const auto& ns : nodeNs_) Run({"ip", "netns", "del", ns});
  if (!switchNs_.empty()) Run({"ip", "netns", "del", switchNs_});
  nodeNs_.clear();
  switchNs_.clear();
}

void EmulatedNet::CleanupStale() {
  FILE* f = popen("ip netns list 2>/dev/null", "r");
  if (f == nullptr) return;
  char line[256];
  std::vector<std::string> stale;
  while (fgets(line, sizeof(line), f)) {
    int pid = 0;
    char rest[200];
    if (sscanf(line, "chorus-%d-%199s", &pid, rest) == 2 && pid > 0 && kill(pid, 0) != 0 &&
        errno == ESRCH) {
      std::string name = line;
      name = name.substr(0, name.find_first_of(" \n"));
      stale.push_back(name);
    }
  }
  pclose(f);
  for (const auto& ns : stale) Run({"ip", "netns", "del", ns});
}

}  // namespace chorusrun
