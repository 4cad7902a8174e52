// A watchdog against hangs: what each rank is doing (its last progress), and a deadline that
// ends the process with that report.
#pragma once

#include <memory>
#include <string>

namespace ctest {

// What each rank (thread or process) is doing, for the watchdog's report.
void setProgress(int rank, const std::string& what);
std::string progressReport();

// Ends the process (exit status 99, after printing `what` and the progress report) unless
// destroyed within seconds * timeoutScale(). A hang becomes a quick, explained failure.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ctest
