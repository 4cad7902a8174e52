// Errors: an exception type that carries an NCCL-style code through the layers, and the
// per-thread "last error" text behind chorusGetLastError (a communicator's own: comm/comm.h).
// The error boundary: every C entry point and every thread the library starts ends in
// `catch (...)` and turns whatever it caught into a Failure with caughtFailure (std::bad_alloc
// and std::system_error become chorusSystemError, anything else chorusInternalError), so no
// exception ever reaches std::terminate.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "chorus/chorus.h"

namespace chorus {

struct Failure : std::exception {
  chorusResult_t code;
  std::string message;
  int cause = -1;  // the rank whose death or failure started this, when known

  Failure(chorusResult_t code_, std::string message_, int cause_ = -1)
      : code(code_), message(std::move(message_)), cause(cause_) {}
  const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] void fail(chorusResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Called inside a catch block (any): the exception being handled as a Failure. A Failure comes
// back as it is; std::bad_alloc becomes chorusSystemError "rank R: out of memory while <doing>",
// std::system_error chorusSystemError "rank R: <doing>: <errno text>", any other exception
// chorusInternalError "rank R: internal error while <doing>: <what>". rank < 0: no rank known.
Failure caughtFailure(int rank, const char* doing) noexcept;

// The error boundary of a C entry point without a try block of its own: runs body (returning a
// chorusResult_t); whatever it throws becomes a Failure (caughtFailure(rank, doing)) handed to
// onError, whose result is returned. Nothing escapes.
template <class Body, class OnError>
chorusResult_t guarded(int rank, const char* doing, Body&& body, OnError&& onError) noexcept {
  try {
    return body();
  } catch (...) {
    const Failure f = caughtFailure(rank, doing);
    try {
      return onError(f);
    } catch (...) {
      return f.code;
    }
  }
}

// f with "rank R: " in front of its message unless the message already names rank R.
Failure namingRank(Failure f, int rank);

void setThreadLastError(const std::string& message) noexcept;
const char* threadLastError();

}  // namespace chorus
