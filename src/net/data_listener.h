// A rank's data listener for the TCP transport (net/tcp.h): open during communicator creation,
// it accepts and authenticates the data and control connections of the ranks of other nodes
// (net/data_listener.cc; the handshake is in net/tcp_wire.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "bootstrap/socket.h"
#include "chorus/chorus.h"

namespace chorus {

// A rank's data listener, open from the start of communicator creation until the TCP links
// exist. A thread serves it: it accepts every connection and runs the handshakes of all of them
// at once (a silent or slow connection delays nobody), closes and logs (CHORUS_DEBUG=WARN) every
// one that does not prove the secret within CHORUS_HANDSHAKE_TIMEOUT_MS (at once for junk or a
// wrong proof), and keeps the authenticated ones for take().
class DataListener {
 public:
  using Key = std::tuple<int, int, int>;  // (rank, channel or tcpwire::kControlChannel, socket)
  // Listens on *addr (port 0: ephemeral; the port is filled in) and starts serving.
  DataListener(SockAddr* addr, const uint8_t secret[16], int rank,
               const std::atomic<bool>* abortFlag);
  ~DataListener();  // closes the listener and every connection not taken
  DataListener(const DataListener&) = delete;
  DataListener& operator=(const DataListener&) = delete;

  // Waits for an authenticated connection for every key of `want` and hands them over. Throws
  // chorus::Failure past the deadline (naming the ranks whose connections did not arrive), on
  // abort, or when `watch` (called about every 100 ms, without the lock; may be empty) throws.
  std::map<Key, int> take(const std::vector<Key>& want, Deadline deadline,
                          const std::function<void()>& watch = {});

 private:
  void serve();
  int fd_ = -1;
  int wakeFd_ = -1;
  uint8_t secret_[16];
  int rank_;
  const std::atomic<bool>* abortFlag_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, int> ready_;
  std::string error_;  // why serve() stopped early (its thread's top caught it); take() throws it
  chorusResult_t errorCode_ = chorusSuccess;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace chorus
