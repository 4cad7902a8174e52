// chorus-tune: measures this machine's hand-off latency and slot bandwidth per protocol, fits the
// tuner's model (src/tune/tuner.h) and caches it; --print shows the model's predicted time for
// every size and choice, marking the one the tuner picks; --cluster predicts a described cluster
// (cluster_model.h) without measuring anything.
//
//   chorus-tune [--ranks N] [--no-save] [--print] [--print-only] [--collective allreduce]
//   chorus-tune --cluster NODESxRANKS [--link-gbps G] [--link-us U] [--mem-gbs B] [--hop-us H]
//               [--channels C] [--min-bytes S] [--max-bytes S] [--collective NAME|all] [--json F]
#include <errno.h>
#include <getopt.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "cluster_model.h"
#include "comm/comm.h"
#include "tune/calibration.h"
#include "tune/tuner.h"

using namespace chorus;

namespace {

// Median time (us) of `iters` AllReduces of `bytes` on n thread ranks with the given overrides.
double timeAllReduce(int n, size_t bytes, const char* algo, const char* proto, int nch, int iters) {
  setenv("CHORUS_ALGO", algo, 1);
  setenv("CHORUS_PROTO", proto, 1);
  setenv("CHORUS_MIN_NCHANNELS", std::to_string(nch).c_str(), 1);
  setenv("CHORUS_MAX_NCHANNELS", std::to_string(nch).c_str(), 1);
  std::vector<chorusComm_t> comms(static_cast<size_t>(n));
  if (chorusCommInitAll(comms.data(), n, nullptr) != chorusSuccess) {
    fprintf(stderr, "chorus-tune: init failed: %s\n", chorusGetLastError(nullptr));
    exit(1);
  }
  const size_t count = std::max<size_t>(1, bytes / 4);
  std::vector<double> samples;
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      std::vector<float> a(count, 1.0f), b(count);
      for (int rep = 0; rep < 5; ++rep) {
        for (int w = 0; w < 2; ++w)
          chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[size_t(r)],
                          nullptr);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i)
          chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comms[size_t(r)],
                          nullptr);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    iters;
        if (r == 0) samples.push_back(us);
      }
    });
  for (auto& t : ts) t.join();
  for (auto c : comms) chorusCommDestroy(c);
  for (const char* v :
       {"CHORUS_ALGO", "CHORUS_PROTO", "CHORUS_MIN_NCHANNELS", "CHORUS_MAX_NCHANNELS"})
    unsetenv(v);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void printTable(const char* collective, int n) {
  static const std::pair<const char*, OpKind> kinds[] = {{"allreduce", OpKind::kAllReduce},
                                                         {"broadcast", OpKind::kBroadcast},
                                                         {"reduce", OpKind::kReduce},
                                                         {"allgather", OpKind::kAllGather},
                                                         {"reducescatter", OpKind::kReduceScatter}};
  OpKind kind = OpKind::kAllReduce;
  for (auto& k : kinds)
    if (strcmp(k.first, collective) == 0) kind = k.second;
  const MachineModel& m = machineModel();
  printf(
      "# model (%s): simple hop %.2f us base %.2f us bw %.2f GB/s; ll hop %.2f us base %.2f us "
      "bw %.2f GB/s; channel gain %.2f wake %.1f us\n",
      m.calibrated ? "calibrated" : "built-in defaults", m.hopUs[0], m.baseUs[0], m.bwGBs[0],
      m.hopUs[1], m.baseUs[1], m.bwGBs[1], m.channelGain, m.channelWakeUs);
  printf("# predicted time (us) of %s on %d ranks; * marks the tuner's choice\n", collective, n);
  struct Col {
    Algo a;
    Proto p;
    int ch;
  };
  std::vector<Col> cols;
  for (int ai = 0; ai < numAlgos(); ++ai)
    for (int pi = 0; pi < kNumProtos; ++pi)
      for (int ch = 1; ch <= 2; ++ch) {
        Algo a = Algo(ai);
        Proto p = Proto(pi);
        if (!algoSupports(a, kind, Shape{n, 1, true}) || !protoSupports(a, p)) continue;
        if (ch > 1 && !algoDesc(a).channels) continue;
        cols.push_back({a, p, ch});
      }
  printf("%12s", "bytes");
  for (auto& c : cols) {
    char name[32];
    snprintf(name, sizeof(name), "%s/%s/%d", algoName(c.a), protoName(c.p), c.ch);
    printf(" %15s", name);
  }
  printf("\n");
  for (size_t bytes = 8; bytes <= (size_t(256) << 20); bytes *= 4) {
    printf("%12zu", bytes);
    double best = 1e300;
    size_t bi = 0;
    for (size_t i = 0; i < cols.size(); ++i) {
      const AlgoDesc& d = algoDesc(cols[i].a);
      if (d.unnamedBelow && bytes >= d.unnamedBelow(Shape{n, 1, true})) continue;
      double t = predictUs(kind, cols[i].a, cols[i].p, cols[i].ch, Shape{n, 1, true}, bytes);
      if (t < best) best = t, bi = i;
    }
    for (size_t i = 0; i < cols.size(); ++i)
      printf(" %14.1f%s",
             predictUs(kind, cols[i].a, cols[i].p, cols[i].ch, Shape{n, 1, true}, bytes),
             i == bi ? "*" : " ");
    printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2;
  bool save = true, print = false, measure = true;
  std::string collective = "allreduce";
  bool cluster = false, collectiveSet = false;
  ClusterSpec spec;
  std::string json;
  auto positive = [](const char* flag, const char* v) {
    char* end = nullptr;
    const double d = strtod(v, &end);
    if (end == v || *end != 0 || !(d > 0)) {
      fprintf(stderr, "chorus-tune: %s needs a positive number, got '%s'\n", flag, v);
      exit(2);
    }
    return d;
  };
  static option opts[] = {{"ranks", required_argument, nullptr, 'n'},
                          {"cluster", required_argument, nullptr, 'C'},
                          {"link-gbps", required_argument, nullptr, 'G'},
                          {"link-us", required_argument, nullptr, 'L'},
                          {"mem-gbs", required_argument, nullptr, 'M'},
                          {"hop-us", required_argument, nullptr, 'H'},
                          {"channels", required_argument, nullptr, 'K'},
                          {"min-bytes", required_argument, nullptr, 'b'},
                          {"max-bytes", required_argument, nullptr, 'e'},
                          {"json", required_argument, nullptr, 'j'},
                          {"no-save", no_argument, nullptr, 's'},
                          {"print", no_argument, nullptr, 'p'},
                          {"print-only", no_argument, nullptr, 'P'},
                          {"collective", required_argument, nullptr, 'c'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "n:spPc:hC:G:L:M:H:K:b:e:j:", opts, nullptr)) != -1) {
    switch (c) {
      case 'n':
        n = atoi(optarg);
        break;
      case 's':
        save = false;
        break;
      case 'p':
        print = true;
        break;
      case 'P':
        print = true, measure = false;
        break;
      case 'c':
        collective = optarg;
        collectiveSet = true;
        break;
      case 'C':
        if (!parseClusterShape(optarg, &spec.nodes, &spec.perNode)) {
          fprintf(stderr, "chorus-tune: --cluster wants NODESxRANKS (e.g. 16x8), got '%s'\n",
                  optarg);
          return 2;
        }
        cluster = true;
        break;
      case 'G':
        spec.linkGbps = positive("--link-gbps", optarg);
        break;
      case 'L':
        spec.linkUs = positive("--link-us", optarg);
        break;
      case 'M':
        spec.memGBs = positive("--mem-gbs", optarg);
        break;
      case 'H':
        spec.hopUs = positive("--hop-us", optarg);
        break;
      case 'K':
        spec.channels = std::clamp(int(positive("--channels", optarg)), 2, 64);
        break;
      case 'b':
        spec.minBytes = size_t(positive("--min-bytes", optarg));
        break;
      case 'e':
        spec.maxBytes = size_t(positive("--max-bytes", optarg));
        break;
      case 'j':
        json = optarg;
        break;
      default:
        printf(
            "usage: chorus-tune [--ranks N] [--no-save] [--print] [--print-only] "
            "[--collective allreduce|broadcast|reduce|allgather|reducescatter]\n"
            "       chorus-tune --cluster NODESxRANKS [--link-gbps G] [--link-us U] [--mem-gbs B]\n"
            "                   [--hop-us H] [--channels C] [--min-bytes S] [--max-bytes S]\n"
            "                   [--collective NAME|all] [--json FILE]\n"
            "Measures hand-off latency and bandwidth per protocol on N thread ranks (default 2),\n"
            "writes the tuner cache (%s), and with --print shows the model's predictions.\n"
            "--cluster measures nothing: it prints, for the described cluster (default link\n"
            "25 Gbit/s; the rest from this machine's model unless given), the tuner's choice,\n"
            "predicted time and bus bandwidth of each collective per size, and the ideal.\n",
            tuneCachePath().c_str());
        return c == 'h' ? 0 : 2;
    }
  }
  if (cluster) {
    if (spec.minBytes > spec.maxBytes) {
      fprintf(stderr, "chorus-tune: --min-bytes %zu is above --max-bytes %zu\n", spec.minBytes,
              spec.maxBytes);
      return 2;
    }
    setMachineModel(clusterModel(machineModel(), spec));
    const auto rows = predictCluster(spec, collectiveSet ? collective.c_str() : "all");
    if (rows.empty()) {
      fprintf(stderr, "chorus-tune: unknown collective '%s'\n", collective.c_str());
      return 2;
    }
    printCluster(spec, rows);
    if (!json.empty()) {
      FILE* f = fopen(json.c_str(), "w");
      if (f == nullptr) {
        fprintf(stderr, "chorus-tune: cannot write %s: %s\n", json.c_str(), strerror(errno));
        return 1;
      }
      writeClusterJson(f, spec, rows);
      fclose(f);
    }
    return 0;
  }
  if (n < 2) n = 2;
  if (measure) {
    MachineModel m = defaultModel();
    const double hops = 2.0 * (n - 1), share = 2.0 * (n - 1) / n;
    double base = timeAllReduce(1, 8, "ring", "simple", 1, 20000);
    for (int pi = 0; pi < kNumProtos; ++pi) {
      const char* proto = protoName(Proto(pi));
      size_t big = pi == 0 ? (size_t(16) << 20) : (size_t(1) << 20);
      double tSmall = timeAllReduce(n, 8, "ring", proto, 1, 5000);
      double tBig = timeAllReduce(n, big, "ring", proto, 1, pi == 0 ? 10 : 50);
      m.baseUs[pi] = base;
      m.hopUs[pi] = std::max(0.01, (tSmall - base) / hops);
      m.bwGBs[pi] = double(big) * share / std::max(1.0, tBig - tSmall) / 1e3;
      printf("%-6s: 8 B %.2f us, %zu B %.1f us -> hop %.3f us, bandwidth %.2f GB/s\n", proto,
             tSmall, big, tBig, m.hopUs[pi], m.bwGBs[pi]);
    }
    double t1 = timeAllReduce(n, size_t(16) << 20, "ring", "simple", 1, 10);
    double t2 = timeAllReduce(n, size_t(16) << 20, "ring", "simple", 2, 10);
    double s1 = timeAllReduce(n, 8192, "ring", "simple", 1, 2000);
    double s2 = timeAllReduce(n, 8192, "ring", "simple", 2, 2000);
    m.channelGain = std::max(0.0, t1 / t2 - 1.0);
    m.channelWakeUs = std::max(0.0, s2 - s1);
    printf("channels: 16 MiB 1 ch %.1f us, 2 ch %.1f us -> gain %.2f; 8 KiB overhead %.1f us\n", t1,
           t2, m.channelGain, m.channelWakeUs);
    // Each AllReduce choice fitted on its own: t = base + hops * hop + bytes * factor / bw.
    struct Probe {
      Algo a;
      Proto p;
      int ch;
    };
    // What to probe: every entry of every calibrated algorithm's descriptor
    // (AlgoDesc::calibration), in table order.
    std::vector<Probe> probes;
    for (int a = 0; a < numAlgos(); ++a)
      if (const AllReduceCalibration* cal = algoDesc(Algo(a)).calibration)
        for (int p = 0; p < kNumProtos; ++p)
          for (int ch = 1; ch <= kCalibratedChannels; ++ch)
            if (cal->fit[p][ch - 1].bwGBs > 0) probes.push_back({Algo(a), Proto(p), ch});
    for (const Probe& pr : probes) {
      const size_t mid = size_t(64) << 10,
                   big = pr.p == Proto::kSimple ? size_t(16) << 20 : size_t(4) << 20;
      const char* an = algoName(pr.a);
      const char* pn = protoName(pr.p);
      double tSmall = timeAllReduce(n, 8, an, pn, pr.ch, 3000);
      double tMid = timeAllReduce(n, mid, an, pn, pr.ch, 200);
      double tBig = timeAllReduce(n, big, an, pn, pr.ch, pr.p == Proto::kSimple ? 10 : 20);
      const double hopsN = modelHops(OpKind::kAllReduce, pr.a, n);
      const double factor = modelByteFactor(OpKind::kAllReduce, pr.a, n);
      ChoiceFit fit;
      fit.hopUs = std::max(0.01, (tSmall - base) / hopsN);
      // Bandwidth from the two larger sizes, so cache-sized messages weigh in too.
      fit.bwGBs = double(big - mid) * factor / std::max(1.0, tBig - tMid) / 1e3;
      fit.measured = true;
      m.allreduce[int(pr.a)][int(pr.p)][pr.ch - 1] = fit;
      printf(
          "allreduce %-4s %-6s %d ch: 8 B %.2f us, 64 KiB %.1f us, %zu B %.1f us -> hop %.3f us, "
          "bw %.2f GB/s\n",
          an, pn, pr.ch, tSmall, tMid, big, tBig, fit.hopUs, fit.bwGBs);
    }
    printf("base (1 rank, 8 B): %.3f us\n", base);
    m.calibrated = true;
    setMachineModel(m);
    if (save) {
      std::string err;
      if (!saveModel(m, &err)) {
        fprintf(stderr, "chorus-tune: %s\n", err.c_str());
        return 1;
      }
      printf("saved %s\n", tuneCachePath().c_str());
    }
  }
  if (print) printTable(collective.c_str(), n);
  return 0;
}
