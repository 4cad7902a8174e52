// The bootstrap root itself, over real sockets: one root (startRoot on 127.0.0.1) lives for the
// whole run; each input is one connection that reads the challenge, sends the input's bytes and
// waits for the root to close it. No input can prove the secret, so every connection must be
// closed (within the handshake deadline, set to 20 ms here), the root must never send more than
// its challenge, and it must keep accepting (a stuck or dead root fails the next input).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "fuzz_check.h"

using namespace chorus;

namespace {
IdData gRoot;

int connectRoot() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(connect(fd, reinterpret_cast<const sockaddr*>(gRoot.addr), gRoot.addrLen) == 0);
  return fd;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("CHORUS_HANDSHAKE_TIMEOUT_MS", "20", 1);
  setenv("CHORUS_BOOTSTRAP_TIMEOUT", "1000000", 1);  // the root waits for ranks "forever"
  SockAddr lo = parseHostPort("127.0.0.1:0");
  uint8_t secret[16];
  for (int i = 0; i < 16; ++i) secret[i] = uint8_t(0x30 + i);
  gRoot = decodeId(startRoot(lo, secret));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = connectRoot();
  wire::Challenge c;
  size_t got = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while (got < sizeof c) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 100);
    const ssize_t k = recv(fd, reinterpret_cast<char*>(&c) + got, sizeof c - got, MSG_DONTWAIT);
    if (k > 0) got += size_t(k);
    FUZZ_CHECK(k != 0);            // the root closed before its challenge
    FUZZ_CHECK(elapsed() < 10.0);  // the root stopped accepting
  }
  uint8_t nonce[16];
  FUZZ_CHECK(wire::parseChallenge(&c, sizeof c, nonce));
  if (size > 0) (void)send(fd, data, std::min<size_t>(size, 1 << 16), MSG_NOSIGNAL);
  // The root must close us: nothing here proves the secret.
  size_t extra = 0;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 100);
    char buf[256];
    const ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      extra += size_t(k);
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
    FUZZ_CHECK(elapsed() < 10.0);  // never closed
  }
  FUZZ_CHECK(extra == 0);  // the root answered something to a stranger
  close(fd);
  return 0;
}
