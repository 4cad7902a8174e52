// Errors: the printf-style fail/format, the conversion of any caught exception into a Failure
// (the error boundary's one helper), and the per-thread last-error text.
#include "base/error.h"

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <new>
#include <system_error>

namespace chorus {

namespace {
thread_local std::string tLastError;
std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return buf;
}
}  // namespace

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void fail(chorusResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Failure{code, s};
}

Failure caughtFailure(int rank, const char* doing) noexcept {
  // Building the message may itself run out of memory: the fixed text below then stands.
  const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  try {
    try {
      throw;
    } catch (const Failure& e) {
      return e;
    } catch (const std::bad_alloc&) {
      return Failure{chorusSystemError, who + "out of memory while " + doing};
    } catch (const std::system_error& e) {
      return Failure{chorusSystemError, who + doing + ": " + e.what() + " (" +
                                            e.code().category().name() + " error " +
                                            std::to_string(e.code().value()) + ")"};
    } catch (const std::exception& e) {
      return Failure{chorusInternalError, who + "internal error while " + doing + ": " + e.what()};
    } catch (...) {
      return Failure{chorusInternalError,
                     who + "internal error while " + doing + ": an unknown exception"};
    }
  } catch (...) {  // no memory left for the message
    try {
      return Failure{chorusSystemError, "out of memory"};
    } catch (...) {
      return Failure{chorusSystemError, std::string()};
    }
  }
}

Failure namingRank(Failure f, int rank) {
  if (rank < 0) return f;
  const std::string me = "rank " + std::to_string(rank);
  size_t at = f.message.find(me);
  while (at != std::string::npos) {
    const size_t end = at + me.size();
    if (end == f.message.size() || !isdigit(static_cast<unsigned char>(f.message[end]))) return f;
    at = f.message.find(me, end);
  }
  f.message = me + ": " + f.message;
  return f;
}

void setThreadLastError(const std::string& message) noexcept {
  try {  // called in catch blocks of the error boundary: must not throw itself
    tLastError = message;
  } catch (...) {
    tLastError.clear();
  }
}
const char* threadLastError() {
  return tLastError.c_str();
}

}  // namespace chorus
