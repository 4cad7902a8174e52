/* mpi_coll_perf: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast or MPI_Reduce
 * (float32, sum) measured the way Chorus's all_reduce_perf, all_gather_perf, reduce_scatter_perf,
 * broadcast_perf and reduce_perf measure theirs, printed in the same nccl-tests table, so that one
 * parser reads both and the two can be compared row by row.
 *
 * -C / --coll allreduce (default) | allgather | reducescatter | broadcast | reduce; -r / --root
 * (0).
 * Sizes as nccl-tests: the size column is the larger of the send and receive buffers (AllGather:
 * all n blocks; ReduceScatter: the n-block input), the count column the elements per rank
 * (AllGather, ReduceScatter) or of the buffer. busbw = algbw * 2(n-1)/n (AllReduce), (n-1)/n
 * (AllGather, ReduceScatter), 1 (Broadcast, Reduce).
 *
 * Per size, out of place then in place (MPI_IN_PLACE): fill the input, poison the output,
 * `-w` warm-up calls (and, before the sweep, `-w` at the largest and at the smallest size, as
 * nccl-tests), a barrier, then wall clock (CLOCK_MONOTONIC) around `-n` calls divided by
 * `-n`, averaged across ranks. Then `-c` checked calls with fresh inputs: small integers
 * (|v| <= 1000) whose sums are exact in float32, compared bit for bit with the result computed
 * independently by every rank; out of place, 64 bytes past the receive buffer must stay
 * untouched. #wrong is the sum over ranks; any wrong value fails the run.
 * In place follows MPI: AllGather's own block sits at rank * count of the receive buffer;
 * ReduceScatter's result lands at the start of the n-block buffer (NCCL's in place puts it at
 * rank * count: the same work). MPI_Bcast has no out-of-place form: both columns broadcast the
 * receive buffer (the out-of-place column is what an MPI program would call). MPI_Reduce in place
 * passes MPI_IN_PLACE on the root only (MPI's rule); only the root's result is checked, as
 * nccl-tests does (out of place, the guard past every rank's receive buffer too).
 *
 * Flags as nccl-tests (same defaults): -b -e -i -f -n -w -c -r (long forms too), -h.
 * Build: mpicc -O2 -Wall -Wextra -o mpi_coll_perf mpi_coll_perf.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POISON 0xA5
#define GUARD_BYTES 64

struct options {
  size_t min_bytes, max_bytes, step_bytes, step_factor;
  int iters, warmup, check;
  int small_iters; /* --small_iters: timed calls at sizes up to SMALL_ITERS_BYTES (0: -n) */
};
/* As the Chorus tools (tools/bench/common/args.h): the same calls at the same sizes. */
#define SMALL_ITERS_BYTES ((size_t)64 << 10)

enum coll { ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE };
static const char* const coll_names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                         "reduce"};
static const char* const prog_names[] = {"mpi_allreduce_perf", "mpi_allgather_perf",
                                         "mpi_reducescatter_perf", "mpi_broadcast_perf",
                                         "mpi_reduce_perf"};
static enum coll coll = ALLREDUCE;
static int root = 0;
static int rank, nranks;

static void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, "mpi_coll_perf: rank %d: %s failed: %s\n", rank, what, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static double wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "8", "64K", "32M", "1G" (binary multiples). */
static int parse_size(const char* s, size_t* out) {
  if (s == NULL || *s == '\0' || *s == '-') return 0;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return 0;
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
      return 0;
  }
  if (*end != '\0' || (shift != 0 && v > ((unsigned long long)LLONG_MAX >> shift))) return 0;
  *out = (size_t)(v << shift);
  return 1;
}

static int parse_int(const char* s, long lo, long hi, long* out) {
  if (s == NULL || *s == '\0') return 0;
  errno = 0;
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static void usage(FILE* f, const char* prog) {
  fprintf(f,
          "USAGE: %s\n"
          "\t[-b,--minbytes <min size in bytes>] (K, M, G suffixes are binary; default 32M)\n"
          "\t[-e,--maxbytes <max size in bytes>] (default 32M)\n"
          "\t[-i,--stepbytes <increment size>] (default 1M)\n"
          "\t[-f,--stepfactor <increment factor>] (default off)\n"
          "\t[-n,--iters <iteration count>] (default 20)\n"
          "\t[--small_iters <iteration count>] timed calls at sizes up to 64 KiB (default: -n)\n"
          "\t[-w,--warmup_iters <warmup iteration count>] (default 1)\n"
          "\t[-c,--check <check iteration count>] (default 1; 0: no check)\n"
          "\t[-C,--coll allreduce|allgather|reducescatter|broadcast|reduce] (default allreduce)\n"
          "\t[-r,--root <root>] (broadcast, reduce; default 0)\n"
          "\t[-h,--help]\n",
          prog);
}

/* 0: ok, 1: help, -1: error (message printed). */
static int parse_args(int argc, char** argv, struct options* o) {
  static const struct option longopts[] = {
      {"minbytes", required_argument, NULL, 'b'},    {"maxbytes", required_argument, NULL, 'e'},
      {"stepbytes", required_argument, NULL, 'i'},   {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'n'},       {"warmup_iters", required_argument, NULL, 'w'},
      {"check", required_argument, NULL, 'c'},       {"help", no_argument, NULL, 'h'},
      {"coll", required_argument, NULL, 'C'},        {"root", required_argument, NULL, 'r'},
      {"small_iters", required_argument, NULL, 'S'}, {NULL, 0, NULL, 0},
  };
  int c;
  opterr = rank == 0;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:C:r:h", longopts, NULL)) != -1) {
    long v = 0;
    int ok = 1;
    switch (c) {
      case 'b':
        ok = parse_size(optarg, &o->min_bytes);
        break;
      case 'e':
        ok = parse_size(optarg, &o->max_bytes);
        break;
      case 'i':
        ok = parse_size(optarg, &o->step_bytes);
        break;
      case 'f':
        ok = parse_int(optarg, 1, 1L << 30, &v);
        o->step_factor = (size_t)v;
        break;
      case 'n':
        ok = parse_int(optarg, 1, INT_MAX, &v);
        o->iters = (int)v;
        break;
      case 'w':
        ok = parse_int(optarg, 0, INT_MAX, &v);
        o->warmup = (int)v;
        break;
      case 'S':
        ok = parse_int(optarg, 1, INT_MAX, &v);
        o->small_iters = (int)v;
        break;
      case 'c':
        ok = parse_int(optarg, 0, INT_MAX, &v);
        o->check = (int)v;
        break;
      case 'r':
        ok = parse_int(optarg, 0, nranks - 1, &v);
        root = (int)v;
        break;
      case 'C':
        ok = 0;
        for (int k = 0; k < (int)(sizeof coll_names / sizeof coll_names[0]); ++k)
          if (strcmp(optarg, coll_names[k]) == 0) {
            coll = (enum coll)k;
            ok = 1;
          }
        break;
      case 'h':
        return 1;
      default:
        return -1;
    }
    if (!ok) {
      if (rank == 0) fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
      return -1;
    }
  }
  const char* err = NULL;
  if (optind < argc)
    err = "unexpected argument";
  else if (o->max_bytes < o->min_bytes)
    err = "invalid option: maxbytes < minbytes";
  else if (o->step_factor <= 1 && o->step_bytes == 0 && o->max_bytes > o->min_bytes)
    err = "invalid option: stepbytes 0 with no step factor never reaches maxbytes";
  if (err != NULL) {
    if (rank == 0) fprintf(stderr, "%s: %s\n", argv[0], err);
    return -1;
  }
  return 0;
}

/* The sizes of the sweep, as Chorus's (and nccl-tests') -b/-e/-i/-f loop: element counts, a
 * count repeated by rounding printed once. Returns a malloc'ed array of *n counts. */
static size_t* sweep_counts(const struct options* o, size_t* n) {
  size_t cap = 64, size = o->min_bytes;
  size_t* counts = malloc(cap * sizeof *counts);
  *n = 0;
  while (counts != NULL && size <= o->max_bytes) {
    const size_t per = coll == ALLGATHER || coll == REDUCESCATTER ? (size_t)nranks : 1;
    const size_t count = size / sizeof(float) / per;
    if (*n == cap) counts = realloc(counts, (cap *= 2) * sizeof *counts);
    if (counts == NULL) break;
    if (*n == 0 || counts[*n - 1] != count) counts[(*n)++] = count;
    if (o->step_factor > 1) {
      if (size == 0)
        size = 1;
      else if (size > o->max_bytes / o->step_factor)
        break;
      else
        size *= o->step_factor;
    } else {
      if (o->step_bytes == 0 || size > o->max_bytes - o->step_bytes) break;
      size += o->step_bytes;
    }
  }
  if (counts == NULL) {
    fprintf(stderr, "mpi_coll_perf: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return counts;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Input of rank r at index i: an integer in [-bound, bound], so every partial sum of nranks
 * values is an integer below 2^24 and exact in float32 whatever the reduction order. */
static float input_value(uint64_t seed, int r, size_t i, int64_t bound) {
  const uint64_t h = mix64(seed ^ mix64(((uint64_t)r << 40) ^ (uint64_t)i));
  return (float)((int64_t)(h % (uint64_t)(2 * bound + 1)) - bound);
}

static int64_t value_bound(void) {
  const int64_t b = ((int64_t)1 << 24) / nranks;
  return b < 1 ? 1 : (b > 1000 ? 1000 : b);
}

static void fill_input(float* buf, size_t count, uint64_t seed) {
  const int64_t bound = value_bound();
  for (size_t i = 0; i < count; ++i) buf[i] = input_value(seed, rank, i, bound);
}

/* Elements of the receive buffer (out of place) and of the input, per collective. */
static size_t recv_elems(size_t count) {
  return coll == ALLGATHER ? count * (size_t)nranks : count;
}
static size_t send_elems(size_t count) {
  return coll == REDUCESCATTER ? count * (size_t)nranks : count;
}

/* Element i of what this rank must hold after the call. */
static float expected(uint64_t seed, size_t i, size_t count, int64_t bound) {
  switch (coll) {
    case ALLGATHER:
      return input_value(seed, (int)(i / count), i % count, bound);
    case BROADCAST:
      return input_value(seed, root, i, bound);
    case REDUCESCATTER: {
      double sum = 0.0;
      for (int r = 0; r < nranks; ++r) sum += input_value(seed, r, (size_t)rank * count + i, bound);
      return (float)sum;
    }
    default: {
      double sum = 0.0;
      for (int r = 0; r < nranks; ++r) sum += input_value(seed, r, i, bound);
      return (float)sum;
    }
  }
}

static int64_t count_wrong(const float* out, size_t count, uint64_t seed, int in_place) {
  const int64_t bound = value_bound();
  int64_t wrong = 0;
  /* Reduce: the result is the root's alone. */
  for (size_t i = 0; i < recv_elems(count) && (coll != REDUCE || rank == root); ++i) {
    const float want = expected(seed, i, count, bound);
    if (memcmp(&out[i], &want, sizeof want) != 0) ++wrong;
  }
  out += recv_elems(count);
  if (!in_place) { /* nothing may be written past the receive buffer */
    const unsigned char* guard = (const unsigned char*)out;
    for (size_t j = 0; j < GUARD_BYTES; j += sizeof(float)) {
      for (size_t k = j; k < j + sizeof(float); ++k) {
        if (guard[k] != POISON) {
          ++wrong;
          break;
        }
      }
    }
  }
  return wrong;
}

static void* allocate(size_t bytes) {
  const size_t align = 4096;
  size_t rounded = (bytes + align - 1) / align * align;
  if (rounded == 0) rounded = align;
  void* p = aligned_alloc(align, rounded);
  if (p == NULL) {
    fprintf(stderr, "mpi_coll_perf: rank %d: cannot allocate %zu bytes\n", rank, rounded);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(p, POISON, rounded);
  return p;
}

struct placement {
  double time_us, algbw, busbw;
  int64_t wrong; /* -1: not checked */
};

/* Out of place: sendbuf -> recvbuf. In place: the input is written into recvbuf, and the call
 * gets MPI_IN_PLACE. */
static void prepare(float* sendbuf, float* recvbuf, size_t count, int in_place, uint64_t seed) {
  const size_t total = coll == REDUCESCATTER ? send_elems(count) : recv_elems(count);
  memset(recvbuf, POISON, total * sizeof(float) + (in_place ? 0 : GUARD_BYTES));
  if (coll == BROADCAST) { /* one buffer: the root's holds the input */
    if (rank == root) fill_input(recvbuf, count, seed);
  } else if (!in_place) {
    fill_input(sendbuf, send_elems(count), seed);
  } else if (coll == ALLGATHER) {
    fill_input(recvbuf + (size_t)rank * count, count, seed);
  } else {
    fill_input(recvbuf, send_elems(count), seed);
  }
}

static int call(const void* src, float* recvbuf, int n) {
  switch (coll) {
    case ALLGATHER:
      return MPI_Allgather(src, n, MPI_FLOAT, recvbuf, n, MPI_FLOAT, MPI_COMM_WORLD);
    case REDUCESCATTER:
      return MPI_Reduce_scatter_block(src, recvbuf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case BROADCAST:
      return MPI_Bcast(recvbuf, n, MPI_FLOAT, root, MPI_COMM_WORLD);
    case REDUCE: /* in place: MPI_IN_PLACE on the root, the input in recvbuf elsewhere */
      return MPI_Reduce(src == MPI_IN_PLACE && rank != root ? recvbuf : src, recvbuf, n, MPI_FLOAT,
                        MPI_SUM, root, MPI_COMM_WORLD);
    default:
      return MPI_Allreduce(src, recvbuf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

static struct placement run_placement(const struct options* o, float* sendbuf, float* recvbuf,
                                      size_t count, int in_place, uint64_t seed) {
  struct placement res = {0, 0, 0, -1};
  const void* src = in_place ? MPI_IN_PLACE : (const void*)sendbuf;
  const int n = (int)count; /* count <= INT_MAX checked in main */
  prepare(sendbuf, recvbuf, count, in_place, seed);

  for (int i = 0; i < o->warmup; ++i) mpi_check(call(src, recvbuf, n), coll_names[coll]);
  const size_t bytes =
      (coll == REDUCESCATTER ? send_elems(count) : recv_elems(count)) * sizeof(float);
  const int iters = o->small_iters > 0 && bytes <= SMALL_ITERS_BYTES ? o->small_iters : o->iters;
  mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  const double t0 = wall_seconds();
  for (int i = 0; i < iters; ++i) mpi_check(call(src, recvbuf, n), coll_names[coll]);
  double seconds = (wall_seconds() - t0) / iters, total = 0.0;
  mpi_check(MPI_Allreduce(&seconds, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "average");
  seconds = total / nranks;

  res.time_us = seconds * 1e6;
  res.algbw = seconds > 0.0 ? (double)bytes / seconds / 1e9 : 0.0;
  res.busbw = res.algbw * (coll == ALLREDUCE                     ? 2.0 * (nranks - 1) / nranks
                           : coll == BROADCAST || coll == REDUCE ? 1.0
                                                                 : (double)(nranks - 1) / nranks);

  if (o->check > 0) {
    int64_t wrong = 0, sum = 0;
    for (int c = 0; c < o->check; ++c) {
      const uint64_t s = mix64(seed ^ (uint64_t)(c + 1));
      prepare(sendbuf, recvbuf, count, in_place, s);
      mpi_check(call(src, recvbuf, n), coll_names[coll]);
      const int64_t w = count_wrong(recvbuf, count, s, in_place);
      if (w > wrong) wrong = w;
    }
    mpi_check(MPI_Allreduce(&wrong, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "sum wrong");
    res.wrong = sum;
  }
  return res;
}

/* nccl-tests number format: `decimals` (2 in nccl-tests), fewer when the number would not fit the
 * width. The time gets 3 below 10 us, where Open MPI's and MPICH's calls take 0.05-0.2 us and 2
 * decimals would round them by up to 10% (Chorus's own figures come from its -J document). */
static const char* fmt_num(char* buf, size_t len, double v, int width, int decimals) {
  for (int d = decimals; d >= 0; --d) {
    snprintf(buf, len, "%.*f", d, v);
    if ((int)strlen(buf) <= width) break;
  }
  return buf;
}

static void print_placement(const struct placement* p) {
  char t[64], a[64], b[64];
  fmt_num(t, sizeof t, p->time_us, 7, p->time_us < 10 ? 3 : 2);
  fmt_num(a, sizeof a, p->algbw, 6, 2);
  fmt_num(b, sizeof b, p->busbw, 6, 2);
  if (p->wrong < 0)
    printf("  %7s  %6s  %6s  %6s", t, a, b, "N/A");
  else
    printf("  %7s  %6s  %6s  %6g", t, a, b, (double)p->wrong);
}

static void print_preamble(const struct options* o) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  char* nl = strchr(lib, '\n');
  if (nl != NULL) *nl = '\0';
  const int factor = o->step_factor > 1;
  printf("# %s: %s\n", prog_names[coll], lib);
  printf("# Collective test starting: %s\n", prog_names[coll]);
  printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      o->min_bytes, o->max_bytes, factor ? o->step_factor : o->step_bytes,
      factor ? "factor" : "bytes", o->warmup, o->iters, o->check);
  printf("#\n# Using devices\n");
}

static void print_header(void) {
  printf(
      "#                                                              out-of-place"
      "                       in-place\n");
  printf(
      "#       size         count      type   redop    root     time   algbw   busbw #wrong"
      "     time   algbw   busbw #wrong\n");
  printf(
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
      "            (us)  (GB/s)  (GB/s)\n");
}

/* The "#  Rank ..." lines: pid and host of every rank, printed by rank 0. */
static void print_devices(void) {
  struct {
    int32_t pid;
    char host[64];
  } mine, *all = NULL;
  memset(&mine, 0, sizeof mine);
  mine.pid = (int32_t)getpid();
  gethostname(mine.host, sizeof mine.host - 1);
  if (rank == 0) all = calloc((size_t)nranks, sizeof mine);
  mpi_check(MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
                       MPI_COMM_WORLD),
            "MPI_Gather");
  if (rank != 0) return;
  for (int r = 0; r < nranks; ++r)
    printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [cpu]\n", r, (int)all[r].pid,
           all[r].host);
  printf("#\n");
  free(all);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  struct options o = {32u << 20, 32u << 20, 1u << 20, 1, 20, 1, 1, 0};
  const int parsed = parse_args(argc, argv, &o);
  if (parsed != 0) {
    if (rank == 0) usage(parsed > 0 ? stdout : stderr, argv[0]);
    MPI_Finalize();
    return parsed > 0 ? 0 : 1;
  }
  if (o.max_bytes / sizeof(float) > INT_MAX) { /* count <= INT_MAX */
    if (rank == 0) fprintf(stderr, "%s: maxbytes too large for an int count\n", argv[0]);
    MPI_Finalize();
    return 1;
  }

  size_t ncounts = 0;
  size_t* counts = sweep_counts(&o, &ncounts);
  float* sendbuf = allocate(o.max_bytes);
  float* recvbuf = allocate(o.max_bytes + GUARD_BYTES);

  if (rank == 0) print_preamble(&o);
  print_devices();
  if (rank == 0) print_header();
  fflush(stdout);

  /* As nccl-tests (and Chorus's tools): -w calls at the largest and then the smallest size
   * before the sweep, so that its first size does not pay the launch's first calls. */
  for (int w = 0; w < 2 && ncounts > 0; ++w) {
    const size_t count = counts[w == 0 ? ncounts - 1 : 0];
    if (count == 0) continue;
    prepare(sendbuf, recvbuf, count, 0, mix64(count));
    for (int i = 0; i < o.warmup; ++i)
      mpi_check(call(sendbuf, recvbuf, (int)count), coll_names[coll]);
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

  int64_t wrong_total = 0;
  double busbw_sum = 0.0;
  int entries = 0;
  for (size_t k = 0; k < ncounts; ++k) {
    const size_t count = counts[k];
    const uint64_t seed = mix64(0xc0705u ^ mix64(count));
    if (count == 0 && coll != ALLREDUCE && coll != BROADCAST) continue;
    struct placement oop = run_placement(&o, sendbuf, recvbuf, count, 0, mix64(seed ^ 1));
    struct placement ip = run_placement(&o, sendbuf, recvbuf, count, 1, mix64(seed ^ 2));
    for (int j = 0; j < 2; ++j) {
      const struct placement* p = j == 0 ? &oop : &ip;
      if (p->wrong > 0) wrong_total += p->wrong;
      busbw_sum += p->busbw;
      ++entries;
    }
    if (rank == 0) {
      const size_t bytes =
          (coll == REDUCESCATTER ? send_elems(count) : recv_elems(count)) * sizeof(float);
      printf("%12li  %12li  %8s  %6s  %6i", (long)bytes, (long)count, "float",
             coll == ALLGATHER || coll == BROADCAST ? "none" : "sum",
             coll == BROADCAST || coll == REDUCE ? root : -1);
      print_placement(&oop);
      print_placement(&ip);
      printf("\n");
      fflush(stdout);
    }
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", (long)wrong_total,
           wrong_total == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g\n", entries > 0 ? busbw_sum / entries : 0.0);
    printf("#\n# Collective test concluded: %s\n", prog_names[coll]);
    fflush(stdout);
  }
  free(counts);
  free(sendbuf);
  free(recvbuf);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
