// A set of communicators made by chorusCommInitAll (comm_set.h).
#include "comm_set.h"

#include <algorithm>

#include "threads.h"

namespace ctest {

CommSet::CommSet(int n) : comms_(n > 0 ? n : 0, nullptr) {
  init_ = chorusCommInitAll(comms_.data(), n, nullptr);
  if (init_ != chorusSuccess) std::fill(comms_.begin(), comms_.end(), nullptr);
}

CommSet::~CommSet() {
  destroyAll();
}

chorusResult_t CommSet::destroyAll() {
  std::vector<chorusResult_t> res(comms_.size(), chorusSuccess);
  runThreads(size(), [&](int r) {
    if (comms_[r] != nullptr) res[r] = chorusCommDestroy(comms_[r]);
  });
  std::fill(comms_.begin(), comms_.end(), nullptr);
  for (auto r : res) {
    if (r != chorusSuccess) return r;
  }
  return chorusSuccess;
}

}  // namespace ctest
