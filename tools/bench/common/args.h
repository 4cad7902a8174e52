// Command-line options of the benchmark tools: the nccl-tests flags (same short and long forms,
// same defaults) plus --intra-bw / --inter-bw / --calibrate for the ideal-bandwidth columns.
#ifndef CHORUS_BENCH_ARGS_H_
#define CHORUS_BENCH_ARGS_H_

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace chorus_bench {

// --small_iters applies to sizes up to this many bytes: there a call takes microseconds, and 20
// calls time the ranks' skew after the barrier more than the calls (OSU's benchmarks likewise run
// 10x more iterations below their large-message size).
inline constexpr size_t kSmallItersBytes = size_t(64) << 10;

struct Options {
  int nThreads = 1;                 // -t: ranks (threads) per process
  int nGpus = 1;                    // -g: only 1 is meaningful on the CPU
  size_t minBytes = 32u << 20;      // -b
  size_t maxBytes = 32u << 20;      // -e
  size_t stepBytes = 1u << 20;      // -i
  size_t stepFactor = 1;            // -f (1: off, additive steps)
  int iters = 20;                   // -n
  int smallIters = 0;               // --small_iters: timed calls up to kSmallItersBytes (0: -n)
  int warmupIters = 1;              // -w
  int aggIters = 1;                 // -m
  int runCycles = 1;                // -N (0: forever)
  int check = 1;                    // -c: checked iterations per size (0: no check)
  std::vector<int> ops{chorusSum};  // -o
  std::vector<chorusDataType_t> types{chorusFloat32};  // -d
  int root = 0;                                        // -r
  bool allRoots = false;                               // -r all
  int blocking = 0;                                    // -z
  int average = 1;                                     // -a: 0 rank 0, 1 mean, 2 min, 3 max
  int cpuTime = 0;                                     // -C
  int timeoutSec = 0;                                  // -T
  std::string jsonFile;                                // -J
  int perIterTiming = 0;                               // -I
  int graph = 0;                             // -G: accepted, ignored (no CUDA graphs on the CPU)
  int parallelInit = 0;                      // -p: accepted, ranks always initialise in parallel
  double intraBw = 0.0;                      // --intra-bw (GB/s), 0: not given
  double interBw = 0.0;                      // --inter-bw (GB/s), 0: not given
  bool calibrate = false;                    // --calibrate: measure B (and I) before the sweep
  size_t calibrateBytes = size_t{32} << 20;  // --calibrate-bytes: the message it exchanges
  // -R: 0 plain buffers; 1 chorusMemAlloc buffers registered with the communicator
  // (chorusCommRegister: the zero-copy collectives); 2 plain buffers registered (as nccl-tests -R)
  int registerBuffers = 0;
  bool device = false;  // --device: CUDA device buffers on device communicators (docs/cuda.md)
  std::vector<std::string> argv;   // the command line, for the JSON document
  std::vector<std::string> notes;  // "# ..." lines to print (ignored flags)
};

enum class ParseStatus { kOk, kHelp, kError };

// Parses argv into *opts. kError fills *error with a one-line reason.
ParseStatus parseArgs(int argc, char** argv, Options* opts, std::string* error);
void printUsage(FILE* out, const char* prog);

// "8", "64K", "32M", "1G" (binary multiples). False on anything else.
bool parseSize(const char* s, size_t* out);

}  // namespace chorus_bench

#endif  // CHORUS_BENCH_ARGS_H_
