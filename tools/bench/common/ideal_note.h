// The ideal busbw of a run (ideal.h's model on the run's bandwidths, ranks and nodes) and the
// "# Ideal busbw ..." line of the preamble.
#ifndef CHORUS_BENCH_IDEAL_NOTE_H_
#define CHORUS_BENCH_IDEAL_NOTE_H_

#include <string>

namespace chorus_bench {

// The ideal busbw for B (per-rank intra-node) and I (per-node inter-node) GB/s on nranks ranks
// over q nodes, and the "# Ideal busbw ..." line (empty when neither bandwidth is known).
struct IdealSetup {
  double ideal = 0.0;
  std::string note;
};

IdealSetup computeIdeal(double intraBw, double interBw, int nranks, int q);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_IDEAL_NOTE_H_
