// An environment variable set (or unset) for the life of an object.
#pragma once

#include <string>

namespace ctest {

// Sets (or, with value nullptr, unsets) an environment variable for the life of the object. Only
// while no other thread reads the environment (before communicators are created).
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace ctest
