// A thin C++ layer over chorus.h: RAII communicator and stream, std::span overloads, errors as
// exceptions (chorus::Error) carrying the result code and chorusGetLastError's message.
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "chorus/chorus.h"

namespace chorus {

class Error : public std::runtime_error {
 public:
  Error(chorusResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  chorusResult_t code() const { return code_; }

 private:
  chorusResult_t code_;
};

inline void check(chorusResult_t r, chorusComm_t comm = nullptr) {
  if (r != chorusSuccess && r != chorusInProgress)
    throw Error(r, std::string(chorusGetErrorString(r)) + ": " + chorusGetLastError(comm));
}

template <typename T>
constexpr chorusDataType_t dataType() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, int8_t>)
    return chorusInt8;
  else if constexpr (std::is_same_v<U, uint8_t>)
    return chorusUint8;
  else if constexpr (std::is_same_v<U, int32_t>)
    return chorusInt32;
  else if constexpr (std::is_same_v<U, uint32_t>)
    return chorusUint32;
  else if constexpr (std::is_same_v<U, int64_t>)
    return chorusInt64;
  else if constexpr (std::is_same_v<U, uint64_t>)
    return chorusUint64;
  else if constexpr (std::is_same_v<U, float>)
    return chorusFloat32;
  else if constexpr (std::is_same_v<U, double>)
    return chorusFloat64;
  else
    static_assert(sizeof(T) == 0,
                  "no chorusDataType_t for this type (use the C API for half types)");
}

class Stream {
 public:
  Stream() { check(chorusStreamCreate(&s_)); }
  ~Stream() {
    if (s_) chorusStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  void synchronize() { check(chorusStreamSynchronize(s_)); }
  bool done() {
    chorusResult_t r = chorusStreamQuery(s_);
    check(r);
    return r == chorusSuccess;
  }
  chorusStream_t get() const { return s_; }

 private:
  chorusStream_t s_ = nullptr;
};

class Comm {
 public:
  // Launcher form (chorusrun, mpirun, srun, torchrun).
  static Comm fromEnv() {
    chorusComm_t c = nullptr;
    check(chorusCommInitFromEnv(&c));
    return Comm(c);
  }
  Comm(int nranks, const chorusUniqueId& id, int rank) {
    check(chorusCommInitRank(&c_, nranks, id, rank));
  }
  explicit Comm(chorusComm_t c) : c_(c) {}
  ~Comm() {
    if (c_) chorusCommDestroy(c_);
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      if (c_) chorusCommDestroy(c_);
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }

  int rank() const {
    int r = -1;
    check(chorusCommUserRank(c_, &r), c_);
    return r;
  }
  int size() const {
    int n = 0;
    check(chorusCommCount(c_, &n), c_);
    return n;
  }
  Comm split(int color, int key) {
    chorusComm_t n = nullptr;
    check(chorusCommSplit(c_, color, key, &n, nullptr), c_);
    return Comm(n);
  }
  void finalize() { check(chorusCommFinalize(c_), c_); }
  void abort() {
    if (c_) chorusCommAbort(std::exchange(c_, nullptr));
  }
  chorusComm_t get() const { return c_; }

  template <typename T>
  void allReduce(std::span<const T> send, std::span<T> recv, chorusRedOp_t op = chorusSum,
                 chorusStream_t stream = nullptr) {
    if (send.size() != recv.size())
      throw Error(chorusInvalidArgument, "allReduce: span sizes differ");
    check(chorusAllReduce(send.data(), recv.data(), send.size(), dataType<T>(), op, c_, stream),
          c_);
  }
  template <typename T>
  void broadcast(std::span<T> buf, int root, chorusStream_t stream = nullptr) {
    check(chorusBroadcast(buf.data(), buf.data(), buf.size(), dataType<T>(), root, c_, stream), c_);
  }
  template <typename T>
  void allGather(std::span<const T> send, std::span<T> recv, chorusStream_t stream = nullptr) {
    if (recv.size() != send.size() * size_t(size()))
      throw Error(chorusInvalidArgument, "allGather: recv must hold size() * send.size() elements");
    check(chorusAllGather(send.data(), recv.data(), send.size(), dataType<T>(), c_, stream), c_);
  }
  template <typename T>
  void send(std::span<const T> buf, int peer, chorusStream_t stream = nullptr) {
    check(chorusSend(buf.data(), buf.size(), dataType<T>(), peer, c_, stream), c_);
  }
  template <typename T>
  void recv(std::span<T> buf, int peer, chorusStream_t stream = nullptr) {
    check(chorusRecv(buf.data(), buf.size(), dataType<T>(), peer, c_, stream), c_);
  }

 private:
  chorusComm_t c_ = nullptr;
};

// RAII group: operations issued while it lives run together when it goes out of scope.
class Group {
 public:
  Group() { check(chorusGroupStart()); }
  ~Group() noexcept(false) {
    chorusResult_t r = chorusGroupEnd();
    if (!std::uncaught_exceptions()) check(r);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

}  // namespace chorus
