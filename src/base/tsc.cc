#include "base/tsc.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace chorus {

namespace {

bool invariantTsc() {
#if defined(__x86_64__) || defined(__i386__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    bool constant = false, nonstop = false;
    for (std::string w; words >> w;) {
      constant = constant || w == "constant_tsc";
      nonstop = nonstop || w == "nonstop_tsc";
    }
    return constant && nonstop;  // the first CPU's flags stand for all
  }
#endif
  return false;
}

double measurePerNs() {
  using C = std::chrono::steady_clock;
  const C::time_point t0 = C::now();
  const uint64_t c0 = tscNow();
  C::time_point t1 = t0;
  while (t1 - t0 < std::chrono::milliseconds(2)) t1 = C::now();
  const uint64_t c1 = tscNow();
  const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  return c1 > c0 ? double(c1 - c0) / ns : 0.0;
}

}  // namespace

bool tscUsable() {
  return tscPerNs() > 0;
}

double tscPerNs() {
  static const double perNs = invariantTsc() ? measurePerNs() : 0.0;
  return perNs;
}

}  // namespace chorus
