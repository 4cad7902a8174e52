// The nccl-tests table: preamble, header, one row per size (out-of-place then in-place) and the
// footer. Everything here formats; nothing communicates.
#ifndef CHORUS_BENCH_REPORT_H_
#define CHORUS_BENCH_REPORT_H_

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus_bench {

// What the library chose for an operation (see describeChoice in harness.h).
struct Choice {
  std::string algorithm;
  std::string protocol;
  int nchannels = 0;
  double predictedUs = 0.0;         // the tuner's model time; 0: none
  double predictedInPlaceUs = 0.0;  // the same for an in-place call (chorusTunerChoiceInPlace)
};

// Per-iteration statistics (-I), in microseconds.
struct IterStats {
  double minUs = 0.0;
  double maxUs = 0.0;
  double p99Us = 0.0;
  double cvPercent = 0.0;  // standard deviation / mean
};

// One placement (out-of-place or in-place) of one row.
struct PlacementResult {
  double timeUs = 0.0;  // per operation, combined across ranks per -a
  double algBw = 0.0;   // GB/s
  double busBw = 0.0;   // GB/s
  int64_t wrong = -1;   // wrong elements summed across ranks; -1: not checked (N/A)
  IterStats iter;       // meaningful with -I
};

struct RowResult {
  size_t bytes = 0;  // max(send, recv) bytes
  size_t count = 0;  // the count argument of the call
  chorusDataType_t type = chorusFloat32;
  int op = -1;    // kNoOp: "none"
  int root = -1;  // -1 for collectives without a root
  PlacementResult outOfPlace;
  PlacementResult inPlace;
  double ideal = 0.0;  // ideal busbw (GB/s); 0: unknown
  Choice choice;
};

// Which optional columns the table has.
struct TableStyle {
  bool cpuTime = false;  // "cputime" instead of "time"
  bool perIter = false;  // -I: min, max, p99, cv% for each placement
  bool ideal = false;    // --intra-bw / --inter-bw: ideal and eff% columns
};

// The widest text of v with 2 decimals that fits `width`, else 1, else 0 decimals.
std::string formatNumber(double v, int width);

// The three header lines ("#  ... out-of-place ... in-place", names, units), each ending '\n'.
std::string formatHeader(const TableStyle& style);
// One data row, ending '\n'.
std::string formatRow(const TableStyle& style, const RowResult& row);

// The mean of the row's two busbw values as a percentage of its ideal (0 when unknown).
double rowEfficiency(const RowResult& row);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_REPORT_H_
