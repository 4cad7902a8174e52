// The TCP sockets of processes (proc_net.h), from /proc/net/tcp{,6} and /proc/<pid>/fd.
#include "proc_net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace ctest {

namespace {

// One row of /proc/net/tcp or tcp6: the local address (hex, "0100007F:1F90"), the state (hex,
// "0A" is LISTEN) and the socket's inode.
struct TcpRow {
  bool v6 = false;
  std::string local, state, inode;
};

// Every row of /proc/net/tcp, then of /proc/net/tcp6.
void forEachTcpRow(const std::function<void(const TcpRow&)>& fn) {
  for (const bool v6 : {false, true}) {
    std::ifstream f(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      std::istringstream is(line);
      TcpRow row;
      row.v6 = v6;
      std::string sl, remote, queues, timer, retr, uid, timeout;
      is >> sl >> row.local >> remote >> row.state >> queues >> timer >> retr >> uid >> timeout >>
          row.inode;
      fn(row);
    }
  }
}

// The port of a local address, or -1.
int portOf(const std::string& local) {
  const size_t colon = local.rfind(':');
  return colon == std::string::npos ? -1 : std::stoi(local.substr(colon + 1), nullptr, 16);
}

// Calls fn with the inode ("12345") of every socket among the open files of `pid`.
void forEachSocketOf(pid_t pid, const std::function<void(const std::string&)>& fn) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    char target[128];
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    const std::string t = target;
    if (t.rfind("socket:[", 0) == 0) fn(t.substr(8, t.size() - 9));
  }
  closedir(d);
}

}  // namespace

std::vector<pid_t> listenerOwners(int port) {
  std::set<std::string> listening;
  forEachTcpRow([&](const TcpRow& row) {
    if (row.state == "0A" && portOf(row.local) == port) listening.insert(row.inode);
  });
  std::vector<pid_t> owners;
  if (listening.empty()) return owners;
  DIR* d = opendir("/proc");
  if (d == nullptr) return owners;
  while (dirent* e = readdir(d)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    bool owns = false;
    forEachSocketOf(pid, [&](const std::string& inode) { owns = owns || listening.count(inode); });
    if (owns) owners.push_back(pid);
  }
  closedir(d);
  return owners;
}

bool listeningWithEnv(int port, const std::string& envEntry) {
  for (pid_t pid : listenerOwners(port)) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/environ");
    if (!f) return true;  // cannot tell: count it
    for (std::string entry; std::getline(f, entry, '\0');)
      if (entry == envEntry) return true;
  }
  return false;
}

bool listeningOn(int port) {
  bool found = false;
  forEachTcpRow([&](const TcpRow& row) {
    if (row.state == "0A" && portOf(row.local) == port) found = true;
  });
  return found;
}

std::vector<OwnedListener> listenersOf(const std::vector<pid_t>& pids) {
  std::map<std::string, pid_t> inodes;  // "12345" -> owner
  for (pid_t pid : pids)
    forEachSocketOf(pid, [&](const std::string& inode) { inodes[inode] = pid; });
  std::vector<OwnedListener> out;
  forEachTcpRow([&](const TcpRow& row) {
    const int port = portOf(row.local);
    if (row.state != "0A" || port < 0 || !inodes.count(row.inode)) return;
    OwnedListener l;
    l.pid = inodes.at(row.inode);
    l.port = port;
    if (!row.v6) {
      auto* a = reinterpret_cast<sockaddr_in*>(&l.addr);
      a->sin_family = AF_INET;
      a->sin_port = htons(uint16_t(l.port));
      a->sin_addr.s_addr = uint32_t(std::stoul(row.local.substr(0, 8), nullptr, 16));
      l.len = sizeof(sockaddr_in);
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&l.addr);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(uint16_t(l.port));
      for (int w = 0; w < 4; ++w) {
        const uint32_t word = uint32_t(std::stoul(row.local.substr(size_t(w) * 8, 8), nullptr, 16));
        std::memcpy(&a->sin6_addr.s6_addr[w * 4], &word, 4);
      }
      l.len = sizeof(sockaddr_in6);
    }
    out.push_back(l);
  });
  return out;
}

}  // namespace ctest
