// The ideal bus bandwidth a collective can reach on a given machine, and the efficiency of a
// measured bus bandwidth against it (the ideal-busbw model).
//
// Symbols: B = per-rank one-way intra-node bandwidth, I = per-node one-way inter-node bandwidth,
// P ranks per node, Q nodes, N = P * Q ranks.
//   One node (Q == 1):  ideal = B   (every rank sends and receives at B all the time)
//   Several nodes:      ideal = min( I * (N-1) * Q / (N * (Q-1)),  B * (N-1) / (N-Q) )
// The first term is the inter-node share of the traffic, (Q-1)/(N-1) of it, carried by Q links of
// I; the second the intra-node share, (N-Q)/(N-1), carried by N links of B. With one rank per
// node (N == Q) nothing moves inside a node and only the first term applies.
//
// Header-only so that the unit tests can include it directly.
#ifndef CHORUS_BENCH_IDEAL_H_
#define CHORUS_BENCH_IDEAL_H_

#include <algorithm>

namespace chorus_bench {

// Ideal bus bandwidth in the unit of B and I (GB/s in the tools). Returns 0 when the inputs make
// no sense (P or Q < 1, a bandwidth that is needed but not positive).
inline double idealBusBw(double B, double I, int P, int Q) {
  if (P < 1 || Q < 1) return 0.0;
  if (Q == 1) return B > 0.0 ? B : 0.0;
  if (I <= 0.0) return 0.0;
  const double N = static_cast<double>(P) * Q;
  const double inter = I * (N - 1.0) * Q / (N * (Q - 1.0));
  if (P == 1) return inter;  // N == Q: no intra-node traffic.
  if (B <= 0.0) return 0.0;
  const double intra = B * (N - 1.0) / (N - Q);
  return std::min(inter, intra);
}

// Efficiency in percent of a measured bus bandwidth against the ideal (0 when ideal is unknown).
inline double efficiencyPercent(double busBw, double ideal) {
  return ideal > 0.0 ? 100.0 * busBw / ideal : 0.0;
}

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_IDEAL_H_
