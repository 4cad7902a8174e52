// The ideal busbw of a run and its preamble line (ideal_note.h).
#include "ideal_note.h"

#include <cstdio>

#include "ideal.h"

namespace chorus_bench {

IdealSetup computeIdeal(double intraBw, double interBw, int nranks, int q) {
  IdealSetup s;
  if (intraBw <= 0.0 && interBw <= 0.0) return s;
  char buf[256];
  if (nranks % q != 0) {
    std::snprintf(buf, sizeof buf,
                  "# Ideal busbw unknown: %d ranks do not split evenly over CHORUS_NNODES=%d",
                  nranks, q);
  } else {
    const int ppn = nranks / q;
    s.ideal = idealBusBw(intraBw, interBw, ppn, q);
    if (s.ideal > 0.0) {
      std::snprintf(buf, sizeof buf,
                    "# Ideal busbw: %g GB/s (intra-node %g GB/s per rank, inter-node %g GB/s per "
                    "node, %d ranks per node, %d nodes)",
                    s.ideal, intraBw, interBw, ppn, q);
    } else {
      std::snprintf(
          buf, sizeof buf, "# Ideal busbw unknown: %d nodes need %s", q,
          q > 1 ? "--inter-bw (and --intra-bw with several ranks per node)" : "--intra-bw");
    }
  }
  s.note = buf;
  return s;
}

}  // namespace chorus_bench
