#include "base/debug.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace chorus {

namespace {
LogLevel parseLevel() {
  const char* v = getenv("CHORUS_DEBUG");
  if (v == nullptr) return LogLevel::kNone;
  if (strcasecmp(v, "WARN") == 0) return LogLevel::kWarn;
  if (strcasecmp(v, "INFO") == 0) return LogLevel::kInfo;
  if (strcasecmp(v, "TRACE") == 0) return LogLevel::kTrace;
  return LogLevel::kNone;
}
std::mutex gLogMutex;
}  // namespace

LogLevel logLevel() {
  static const LogLevel level = parseLevel();
  return level;
}

void logMessage(LogLevel level, int rank, const char* fmt, ...) {
  static char host[64] = {0};
  if (host[0] == 0) {
    gethostname(host, sizeof(host) - 1);
    char* dot = strchr(host, '.');
    if (dot) *dot = 0;
  }
  const char* name = level == LogLevel::kWarn   ? "WARN"
                     : level == LogLevel::kInfo ? "INFO"
                                                : "TRACE";
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(gLogMutex);
  if (rank >= 0)
    fprintf(stderr, "%s:%d:%ld [%d] CHORUS %s %s\n", host, getpid(), (long)syscall(SYS_gettid),
            rank, name, msg);
  else
    fprintf(stderr, "%s:%d:%ld CHORUS %s %s\n", host, getpid(), (long)syscall(SYS_gettid), name,
            msg);
}

}  // namespace chorus
