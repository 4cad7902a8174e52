// Errors: an exception type that carries an NCCL-style code through the layers, and the
// per-thread "last error" text behind chorusGetLastError (a communicator's own: comm/comm.h).
#pragma once

#include <string>

#include "chorus/chorus.h"

namespace chorus {

struct Failure {
  chorusResult_t code;
  std::string message;
  int cause = -1;  // the rank whose death or failure started this, when known
};

[[noreturn]] void fail(chorusResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

void setThreadLastError(const std::string& message);
const char* threadLastError();

}  // namespace chorus
