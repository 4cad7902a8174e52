// The TCP sockets of processes, as /proc/net/tcp and /proc/net/tcp6 list them: which ports
// listen, and which listening sockets belong to given processes (the leak checks of the failure
// and shrink tests). The one parser of those files in the tests.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace ctest {

// Whether a TCP socket (IPv4 or IPv6, any process) is in state LISTEN on `port`.
bool listeningOn(int port);

// The processes (any on the machine) that own a TCP socket in state LISTEN on `port`, and
// whether one of them has `envEntry` (e.g. "CHORUS_SECRET=...") in its environment: a job's
// leftover listener, where another program may have taken the port since the job ended.
std::vector<pid_t> listenerOwners(int port);
bool listeningWithEnv(int port, const std::string& envEntry);

// A TCP socket in state LISTEN owned by one of a set of processes.
struct OwnedListener {
  pid_t pid = -1;
  int port = 0;
  sockaddr_storage addr{};
  socklen_t len = 0;
};

// Every LISTEN socket of /proc/net/tcp{,6} whose inode is among the open files of `pids`.
std::vector<OwnedListener> listenersOf(const std::vector<pid_t>& pids);

}  // namespace ctest
