// chorusrun's shared pieces: its constants, its own output (stdout / stderr sinks that survive
// a closed pipe), signal names, and the parsing of numbers in its options.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace chorusrun {

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

// Writes all of iov[0..cnt) to fd. Returns false on a write error (e.g. EPIPE).
bool WriteFully(int fd, iovec* iov, int cnt);

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

extern Sink g_stdout;
extern Sink g_stderr;

// Prints "chorusrun: <msg>\n" to stderr as a single write.
void Message(const std::string& msg);
std::string SignalName(int sig);
bool ParseInt(const char* s, long min, long max, long* out);
bool ParseSeconds(const char* s, double* out);
// Makes sure fds 0, 1 and 2 are open, so that pipes created later never land on them.
void EnsureStdFds();

}  // namespace chorusrun
