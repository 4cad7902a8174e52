// -I: per-iteration statistics (iter_stats.h).
#include "iter_stats.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace chorus_bench {

IterStats iterStats(std::vector<double> us) {
  IterStats s;
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  s.minUs = us.front();
  s.maxUs = us.back();
  const size_t n = us.size();
  const size_t p99 = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99Us = us[std::min(n, std::max<size_t>(p99, 1)) - 1];
  double mean = 0.0;
  for (const double v : us) mean += v;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (const double v : us) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n);
  s.cvPercent = mean > 0.0 ? 100.0 * std::sqrt(var) / mean : 0.0;
  return s;
}

}  // namespace chorus_bench
