// A set of communicators made by chorusCommInitAll, destroyed with it.
#pragma once

#include <chorus/chorus.h>

#include <vector>

namespace ctest {

// chorusCommInitAll(n); the destructor destroys every communicator still held, one thread per
// rank (forget() one that the test destroyed or aborted itself).
class CommSet {
 public:
  explicit CommSet(int n);
  ~CommSet();
  CommSet(const CommSet&) = delete;
  CommSet& operator=(const CommSet&) = delete;
  chorusResult_t initResult() const { return init_; }
  int size() const { return static_cast<int>(comms_.size()); }
  chorusComm_t operator[](int i) const { return comms_[i]; }
  const std::vector<chorusComm_t>& comms() const { return comms_; }
  void forget(int i) { comms_[i] = nullptr; }
  // Destroys every communicator still held (one thread per rank); the first failure.
  chorusResult_t destroyAll();

 private:
  chorusResult_t init_;
  std::vector<chorusComm_t> comms_;
};

}  // namespace ctest
