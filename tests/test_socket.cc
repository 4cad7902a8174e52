// Interface and address-family choice (CHORUS_SOCKET_IFNAME, CHORUS_SOCKET_FAMILY) and a real
// job whose bootstrap and data connections all run over IPv6.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/error.h"
#include "bootstrap/socket.h"
#include "run_command.h"
#include "scoped_env.h"
#include "timing.h"

namespace {

using namespace ctest;

TEST(SocketIfName, NcclSyntax) {
  using chorus::ifNameMatches;
  EXPECT_TRUE(ifNameMatches("", "eth0"));
  EXPECT_TRUE(ifNameMatches("eth", "eth0"));    // prefix
  EXPECT_TRUE(ifNameMatches("eth,ib", "ib1"));  // list
  EXPECT_FALSE(ifNameMatches("eth,ib", "lo"));
  EXPECT_FALSE(ifNameMatches("^docker", "docker0"));  // exclude
  EXPECT_TRUE(ifNameMatches("^docker", "eth0"));
  EXPECT_TRUE(ifNameMatches("=eth0", "eth0"));  // exact
  EXPECT_FALSE(ifNameMatches("=eth0", "eth01"));
  EXPECT_FALSE(ifNameMatches("^=eth0", "eth0"));  // exclude exactly
  EXPECT_TRUE(ifNameMatches("^=eth0", "eth01"));
  EXPECT_FALSE(ifNameMatches("eth0", "eth"));  // the name must start with the prefix
}

TEST(SocketIfName, LoopbackByName) {
  ScopedEnv ifname("CHORUS_SOCKET_IFNAME", "=lo");
  const chorus::SockAddr a = chorus::pickLocalAddress();
  ASSERT_EQ(a.ss.ss_family, AF_INET) << a.str();  // IPv4 first
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr), INADDR_LOOPBACK);
}

TEST(SocketIfName, DefaultSkipsLoopbackWhenAnotherInterfaceIsUp) {
  const chorus::SockAddr a = chorus::pickLocalAddress();
  ASSERT_TRUE(a.ss.ss_family == AF_INET || a.ss.ss_family == AF_INET6);
  // Loopback only when nothing else is up (then a message says why the check is moot).
  const CommandResult up = runCommand(
      {"/bin/sh", "-c", "ip -o addr show up 2>/dev/null | grep -v ' lo ' | grep -c 'inet' || true"},
      10);
  if (std::atoi(up.output.c_str()) == 0) GTEST_SKIP() << "no interface but lo is up";
  if (a.ss.ss_family == AF_INET) {
    EXPECT_NE(ntohl(reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr.s_addr), INADDR_LOOPBACK)
        << a.str();
  }
}

TEST(SocketFamily, Ipv6OnlyAndBadValues) {
  {
    ScopedEnv ifname("CHORUS_SOCKET_IFNAME", "=lo");
    ScopedEnv family("CHORUS_SOCKET_FAMILY", "AF_INET6");
    EXPECT_EQ(chorus::pickLocalAddress().ss.ss_family, AF_INET6);
  }
  ScopedEnv family("CHORUS_SOCKET_FAMILY", "ipx");
  try {
    chorus::pickLocalAddress();
    ADD_FAILURE() << "CHORUS_SOCKET_FAMILY=ipx accepted";
  } catch (const chorus::Failure& e) {
    EXPECT_EQ(e.code, chorusInvalidArgument);
    EXPECT_NE(e.message.find("CHORUS_SOCKET_FAMILY"), std::string::npos) << e.message;
  }
}

bool haveIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

int freeIpv6Port() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin6_port);
}

// 3 ranks on 2 emulated nodes (2 + 1): the root at [::1], data listeners on ::1, every
// collective right.
TEST(SocketFamily, JobOverIpv6) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) here";
  const std::string id = "[::1]:" + std::to_string(freeIpv6Port());
  std::string script;
  for (int r = 0; r < 3; ++r)
    script += "CHORUS_RANK=" + std::to_string(r) + " CHORUS_NRANKS=3 CHORUS_COMM_ID='" + id +
              "' CHORUS_SECRET=00112233445566778899aabbccddeeff CHORUS_HOSTID=v6node" +
              std::to_string(r / 2) +
              " CHORUS_SOCKET_FAMILY=AF_INET6 CHORUS_SOCKET_IFNAME==lo CHORUS_DEBUG=INFO " +
              MP_WORKER_PATH + " --counts 0,1,7,1000 --big none --timeout 100 > /tmp/chorus-v6-" +
              std::to_string(getpid()) + "-" + std::to_string(r) + ".log 2>&1 & p" +
              std::to_string(r) + "=$!\n";
  script +=
      "s=0; for p in $p0 $p1 $p2; do wait $p || s=1; done\n"
      "cat /tmp/chorus-v6-" +
      std::to_string(getpid()) + "-*.log; rm -f /tmp/chorus-v6-" + std::to_string(getpid()) +
      "-*.log; exit $s\n";
  const CommandResult r = runCommand({"/bin/sh", "-c", script}, 150 * timeoutScale());
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.exitCode, 0) << r.output.substr(r.output.size() > 6000 ? r.output.size() - 6000 : 0);
  EXPECT_NE(r.output.find("0 failures"), std::string::npos) << r.output.substr(0, 3000);
  EXPECT_EQ(r.output.find(" 0 cases,"), std::string::npos);
  EXPECT_NE(r.output.find("TCP transport"), std::string::npos) << "no rank used TCP";
  EXPECT_NE(r.output.find("data listener on [::1]:"), std::string::npos)
      << r.output.substr(0, 3000);
  EXPECT_EQ(r.output.find("data listener on 127."), std::string::npos);
}

}  // namespace
