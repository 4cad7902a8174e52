// A unique id's bytes (chorus::wire::tryDecodeId / decodeId): ids travel between processes
// through whatever the application uses (files, sockets, MPI), so they are untrusted bytes.
// A decoded id's address is then used the way Bootstrap uses it (printed, its port read).
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "bootstrap/bootstrap.h"
#include "fuzz_check.h"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  IdData d;
  const bool ok = wire::tryDecodeId(data, size, &d);
  if (size < sizeof(IdData)) FUZZ_CHECK(!ok);
  chorusUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::memcpy(id.internal, data, std::min(size, sizeof(id.internal)));
  bool threw = false;
  try {
    IdData e = decodeId(id);
    FUZZ_CHECK(e.magic == kIdMagic);
  } catch (const Failure& f) {
    threw = true;
    FUZZ_CHECK(f.code == chorusInvalidArgument);
  }
  if (size >= sizeof(IdData)) FUZZ_CHECK(ok == !threw);
  if (!ok) return 0;
  FUZZ_CHECK(d.addrLen == sizeof(sockaddr_in) || d.addrLen == sizeof(sockaddr_in6));
  SockAddr a;
  std::memcpy(&a.ss, d.addr, d.addrLen);
  a.len = d.addrLen;
  const std::string s = a.str();
  FUZZ_CHECK(!s.empty());
  const int port = a.port();
  FUZZ_CHECK(port >= 0 && port < 65536);
  // Encoding what was decoded gives the same id fields back.
  const chorusUniqueId again = encodeId(a, d.secret);
  IdData e = decodeId(again);
  FUZZ_CHECK(e.addrLen == d.addrLen && std::memcmp(e.addr, d.addr, d.addrLen) == 0 &&
             std::memcmp(e.secret, d.secret, 16) == 0);
  return 0;
}
