// Logging with rank prefixes, controlled by CHORUS_DEBUG=WARN|INFO|TRACE.
#pragma once

#include <cstdarg>

namespace chorus {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel logLevel();
// rank < 0: no rank known yet.
void logMessage(LogLevel level, int rank, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace chorus

#define CHORUS_WARN(rank, ...)                                              \
  do {                                                                      \
    if (::chorus::logLevel() >= ::chorus::LogLevel::kWarn)                  \
      ::chorus::logMessage(::chorus::LogLevel::kWarn, (rank), __VA_ARGS__); \
  } while (0)
#define CHORUS_INFO(rank, ...)                                              \
  do {                                                                      \
    if (::chorus::logLevel() >= ::chorus::LogLevel::kInfo)                  \
      ::chorus::logMessage(::chorus::LogLevel::kInfo, (rank), __VA_ARGS__); \
  } while (0)
#define CHORUS_TRACE(rank, ...)                                              \
  do {                                                                       \
    if (::chorus::logLevel() >= ::chorus::LogLevel::kTrace)                  \
      ::chorus::logMessage(::chorus::LogLevel::kTrace, (rank), __VA_ARGS__); \
  } while (0)
