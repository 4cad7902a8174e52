#include "args.h"

#include <getopt.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "types.h"

namespace chorus_bench {

namespace {

enum LongOnly { kIntraBw = 256, kInterBw, kCalibrate, kCalibrateBytes, kDevice, kSmallIters };

bool parseLong(const char* s, long lo, long hi, long* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parseInt(const char* s, int lo, int hi, int* out) {
  long v;
  if (!parseLong(s, lo, hi, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseDouble(const char* s, double* out) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(v >= 0.0)) return false;
  *out = v;
  return true;
}

}  // namespace

bool parseSize(const char* s, size_t* out) {
  if (s == nullptr || *s == '\0' || *s == '-') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end != '\0') return false;
  if (shift != 0 && v > (static_cast<unsigned long long>(LLONG_MAX) >> shift)) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

void printUsage(FILE* out, const char* prog) {
  std::fprintf(out,
               "USAGE: %s\n"
               "\t[-t,--nthreads <num threads>] (ranks per process, one thread each)\n"
               "\t[-g,--ngpus <gpus per thread>] (must be 1: one CPU rank per thread)\n"
               "\t[-b,--minbytes <min size in bytes>] (K, M, G suffixes are binary)\n"
               "\t[-e,--maxbytes <max size in bytes>]\n"
               "\t[-i,--stepbytes <increment size>]\n"
               "\t[-f,--stepfactor <increment factor>]\n"
               "\t[-n,--iters <iteration count>]\n"
               "\t[--small_iters <iteration count>] timed calls at sizes up to 64 KiB (default: "
               "-n)\n"
               "\t[-m,--agg_iters <aggregated iteration count>]\n"
               "\t[-w,--warmup_iters <warmup iteration count>]\n"
               "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)]\n"
               "\t[-p,--parallel_init <0/1>] (accepted; ranks always initialise in parallel)\n"
               "\t[-c,--check <check iteration count>]\n"
               "\t[-o,--op <sum/prod/min/max/avg/all>]\n"
               "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/"
               "bfloat16/all>]\n"
               "\t[-r,--root <root>|all]\n"
               "\t[-z,--blocking <0/1>]\n"
               "\t[-R,--local_register <0/1/2>] 1: chorusMemAlloc buffers registered with the "
               "communicator (zero-copy collectives); 2: ordinary buffers registered\n"
               "\t[-G,--cudagraph <num graph launches>] (accepted; ignored on the CPU)\n"
               "\t[-C,--report_cputime <0/1>]\n"
               "\t[-a,--average <0/1/2/3> report average iteration time "
               "<0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
               "\t[-T,--timeout <time in seconds>]\n"
               "\t[-J,--output_file <file>] write the results as JSON\n"
               "\t[-I,--per_iter_timing <0/1>] per-iteration min, max, p99 and cv%% columns\n"
               "\t[--intra-bw <GB/s>] per-rank intra-node bandwidth: adds ideal and eff%% "
               "columns\n"
               "\t[--inter-bw <GB/s>] per-node inter-node bandwidth (with CHORUS_NNODES > 1)\n"
               "\t[--calibrate] measure both bandwidths between ranks before the sweep (an "
               "explicit --intra-bw / --inter-bw wins)\n"
               "\t[--calibrate-bytes <size>] message --calibrate exchanges (default 32M; implies "
               "--calibrate)\n"
               "\t[--device] buffers in CUDA device memory, rank i on device i mod #devices "
               "(CUDA builds with a GPU)\n"
               "\t[-h,--help]\n",
               prog);
}

ParseStatus parseArgs(int argc, char** argv, Options* o, std::string* error) {
  static const struct option kLong[] = {
      {"nthreads", required_argument, nullptr, 't'},
      {"ngpus", required_argument, nullptr, 'g'},
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"agg_iters", required_argument, nullptr, 'm'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"run_cycles", required_argument, nullptr, 'N'},
      {"parallel_init", required_argument, nullptr, 'p'},
      {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"blocking", required_argument, nullptr, 'z'},
      {"local_register", required_argument, nullptr, 'R'},
      {"cudagraph", required_argument, nullptr, 'G'},
      {"report_cputime", required_argument, nullptr, 'C'},
      {"average", required_argument, nullptr, 'a'},
      {"timeout", required_argument, nullptr, 'T'},
      {"output_file", required_argument, nullptr, 'J'},
      {"per_iter_timing", required_argument, nullptr, 'I'},
      {"intra-bw", required_argument, nullptr, kIntraBw},
      {"inter-bw", required_argument, nullptr, kInterBw},
      {"calibrate", no_argument, nullptr, kCalibrate},
      {"calibrate-bytes", required_argument, nullptr, kCalibrateBytes},
      {"device", no_argument, nullptr, kDevice},
      {"small_iters", required_argument, nullptr, kSmallIters},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  o->argv.assign(argv, argv + argc);
  optind = 1;
  for (;;) {
    int longIndex = 0;
    const int c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:R:G:C:a:T:J:I:h", kLong,
                              &longIndex);
    if (c == -1) break;
    const char* arg = optarg;
    bool ok = true;
    long l = 0;
    switch (c) {
      case 't':
        ok = parseInt(arg, 1, 4096, &o->nThreads);
        break;
      case 'g':
        ok = parseInt(arg, 1, INT_MAX, &o->nGpus);
        if (ok && o->nGpus != 1) {
          *error = "-g/--ngpus " + std::string(arg) +
                   ": Chorus runs one CPU rank per thread (one \"device\" each); use -t for more "
                   "ranks per process";
          return ParseStatus::kError;
        }
        break;
      case 'b':
        ok = parseSize(arg, &o->minBytes);
        break;
      case 'e':
        ok = parseSize(arg, &o->maxBytes);
        break;
      case 'i':
        ok = parseSize(arg, &o->stepBytes);
        break;
      case 'f':
        ok = parseLong(arg, 1, 1L << 30, &l);
        o->stepFactor = static_cast<size_t>(l);
        break;
      case 'n':
        ok = parseInt(arg, 1, INT_MAX, &o->iters);
        break;
      case 'm':
        ok = parseInt(arg, 1, INT_MAX, &o->aggIters);
        break;
      case 'w':
        ok = parseInt(arg, 0, INT_MAX, &o->warmupIters);
        break;
      case 'N':
        ok = parseInt(arg, 0, INT_MAX, &o->runCycles);
        break;
      case 'p':
        ok = parseInt(arg, 0, 1, &o->parallelInit);
        break;
      case 'c':
        ok = parseInt(arg, 0, INT_MAX, &o->check);
        break;
      case 'o':
        ok = parseOps(arg, &o->ops);
        break;
      case 'd':
        ok = parseTypes(arg, &o->types);
        break;
      case 'r':
        if (std::strcmp(arg, "all") == 0) {
          o->allRoots = true;
        } else {
          ok = parseInt(arg, 0, INT_MAX, &o->root);
          o->allRoots = false;
        }
        break;
      case 'z':
        ok = parseInt(arg, 0, 1, &o->blocking);
        break;
      case 'R':
        ok = parseInt(arg, 0, 2, &o->registerBuffers);
        break;
      case 'G':
        ok = parseInt(arg, 0, INT_MAX, &o->graph);
        if (ok && o->graph > 0) {
          o->notes.push_back("# -G/--cudagraph " + std::string(arg) +
                             " ignored: no CUDA graphs on the CPU");
          o->graph = 0;
        }
        break;
      case 'C':
        ok = parseInt(arg, 0, 1, &o->cpuTime);
        break;
      case 'a':
        ok = parseInt(arg, 0, 3, &o->average);
        break;
      case 'T':
        ok = parseInt(arg, 0, INT_MAX, &o->timeoutSec);
        break;
      case 'J':
        o->jsonFile = arg;
        ok = !o->jsonFile.empty();
        break;
      case 'I':
        ok = parseInt(arg, 0, 1, &o->perIterTiming);
        break;
      case kSmallIters:
        ok = parseInt(arg, 1, INT_MAX, &o->smallIters);
        break;
      case kIntraBw:
        ok = parseDouble(arg, &o->intraBw);
        break;
      case kInterBw:
        ok = parseDouble(arg, &o->interBw);
        break;
      case kCalibrate:
        o->calibrate = true;
        break;
      case kCalibrateBytes:
        ok = parseSize(arg, &o->calibrateBytes) && o->calibrateBytes > 0;
        o->calibrate = true;
        break;
      case kDevice:
        o->device = true;
        break;
      case 'h':
        return ParseStatus::kHelp;
      default:  // getopt_long has printed what was wrong
        *error = "invalid option";
        return ParseStatus::kError;
    }
    if (!ok) {
      const char* name = (c >= 256) ? kLong[longIndex].name : nullptr;
      *error = "invalid value '" + std::string(arg ? arg : "") + "' for " +
               (name ? "--" + std::string(name) : "-" + std::string(1, static_cast<char>(c)));
      return ParseStatus::kError;
    }
  }
  if (optind < argc) {
    *error = "unexpected argument '" + std::string(argv[optind]) + "'";
    return ParseStatus::kError;
  }
  if (o->maxBytes < o->minBytes) {
    *error = "invalid option: maxbytes < minbytes";
    return ParseStatus::kError;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0 && o->maxBytes > o->minBytes) {
    *error = "invalid option: stepbytes 0 with no step factor never reaches maxbytes";
    return ParseStatus::kError;
  }
  return ParseStatus::kOk;
}

}  // namespace chorus_bench
