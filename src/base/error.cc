#include "base/error.h"

#include <cstdarg>
#include <cstdio>

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

void setThreadLastError(const std::string& message) {
  tLastError = message;
}
const char* threadLastError() {
  return tLastError.c_str();
}

}  // namespace chorus
