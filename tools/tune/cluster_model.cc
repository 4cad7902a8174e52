// chorus-tune --cluster: the tuner's model applied to a described cluster (nodes, ranks per node,
// link bandwidth and latency, per-rank memory bandwidth), with no communicator: for every
// collective and size, the choice the tuner would make there (algorithm, protocol, channels),
// its predicted time, algorithm and bus bandwidth, and the ideal bus bandwidth of that cluster
// (seed 001: one node B; several min(I (N-1) Q / (N ), B (N-1) / (N-Q))).
#include "cluster_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "calibration.h"
#include "collectives.h"
#include "ideal.h"
#include "net/tcp.h"
#include "topo/tree.h"
#include "tune/tuner.h"

namespace chorus {

namespace {

// The collectives the model covers, with the benchmark that measures each (its busbw factor is
// nccl-tests', seed 000: tools/bench/common/collectives.cc).
struct Kind {
  OpKind kind;
  const char* program;
};
const Kind kKinds[] = {{OpKind::kAllReduce, "all_reduce_perf"},
                       {OpKind::kBroadcast, "broadcast_perf"},
                       {OpKind::kReduce, "reduce_perf"},
                       {OpKind::kAllGather, "all_gather_perf"},
                       {OpKind::kReduceScatter, "reduce_scatter_perf"}};

}  // namespace

bool parseClusterShape(const char* s, int* nodes, int* perNode) {
  char x = 0;
  char tail = 0;
  return s != nullptr && sscanf(s, "%d%c%d%c", nodes, &x, perNode, &tail) == 3 &&
         (x == 'x' || x == 'X') && *nodes >= 1 && *perNode >= 1 && *nodes * *perNode <= 65536;
}

std::unique_ptr<MachineModel> clusterModel(const MachineModel& base, const ClusterSpec& spec) {
  auto model = std::make_unique<MachineModel>(base);  // about 225 KiB: on the heap
  MachineModel& m = *model;
  const int simple = int(Proto::kSimple);
  // A described value replaces the Simple protocol's term; the other protocols and every fitted
  // choice keep their measured ratio to it: a fit's time at 8 B is its latency, the rest its bytes.
  auto eachFit = [&](auto&& f) { forEachFit(m, [&](FitIndex, ChoiceFit& fit) { f(fit); }); };
  auto scaleOf = [&](double want, const double* terms) {
    return want > 0 && terms[simple] > 0 ? want / terms[simple] : 0.0;
  };
  if (const double s = scaleOf(spec.memGBs, m.bwGBs); s > 0) {
    for (int p = 0; p < kNumProtos; ++p) m.bwGBs[p] *= s;
    eachFit([&](ChoiceFit& fit) {
      for (int k = 1; k < fit.nknots; ++k) fit.us[k] = fit.us[0] + (fit.us[k] - fit.us[0]) / s;
    });
  }
  if (const double s = scaleOf(spec.hopUs, m.hopUs); s > 0) {
    for (int p = 0; p < kNumProtos; ++p) m.hopUs[p] *= s;
    eachFit([&](ChoiceFit& fit) {
      const double more = fit.us[0] * (s - 1);
      for (int k = 0; k < fit.nknots; ++k) fit.us[k] += more;
    });
  }
  m.netBwGBs = spec.linkGbps / 8.0;
  if (spec.linkUs > 0) m.netHopUs = spec.linkUs;
  return model;
}

Shape clusterShape(const ClusterSpec& spec) {
  Shape s{spec.nodes * spec.perNode, spec.nodes, true};
  s.treeDepth = std::max(treeDepth(s.nranks, 0), treeDepth(s.nranks, 1));
  s.onlineCores = spec.perNode;  // a rank per core: not oversubscribed
  s.oversubscribed = false;
  if (spec.nodes == 1) s.channelCpus = 1;        // ... and one channel at a time (comm/plan.h)
  if (spec.nodes > 1) s.protos = kTcpProtocols;  // the nodes' links are TCP (net/tcp.h)
  return s;
}

std::vector<ClusterRow> predictCluster(const ClusterSpec& spec, const char* only) {
  const Shape shape = clusterShape(spec);
  const MachineModel& m = machineModel();
  const int n = shape.nranks;
  // B: one rank's one-way memory bandwidth (the model's Simple protocol, one channel); I: one
  // node's link, each direction.
  const double ideal =
      chorus_bench::idealBusBw(m.bwGBs[int(Proto::kSimple)], m.netBwGBs, spec.perNode, spec.nodes);
  const TunerEnv env = readTunerEnv();  // CHORUS_ALGO / CHORUS_PROTO apply as on a communicator
  std::vector<ClusterRow> rows;
  for (const Kind& k : kKinds) {
    const char* name = collectiveKey(k.kind);  // "allreduce", ...
    const chorus_bench::CollDesc* bench = chorus_bench::findCollective(k.program);
    if (only != nullptr && *only != 0 && strcmp(only, "all") != 0 && strcmp(only, name) != 0)
      continue;
    for (size_t bytes = spec.minBytes; bytes <= spec.maxBytes; bytes *= 4) {
      ClusterRow r{};
      r.collective = name;
      r.bytes = bytes;
      if (n == 1) {
        r.algorithm = "local";
        r.protocol = "none";
        r.nchannels = 0;
        r.us = m.baseUs[0];
      } else {
        const Choice c = chooseForShape(shape, spec.channels, k.kind, bytes, env);
        r.algorithm = algoName(c.algo);
        r.protocol = protoName(c.proto);
        r.nchannels = c.nchannels;
        r.us = c.predictedUs;
      }
      r.algBw = double(bytes) / (r.us * 1e3);  // GB/s
      r.busBw = r.algBw * bench->busBwFactor(n);
      r.idealBusBw = ideal;
      rows.push_back(r);
      if (bytes > spec.maxBytes / 4) break;
    }
  }
  return rows;
}

void printCluster(const ClusterSpec& spec, const std::vector<ClusterRow>& rows) {
  const MachineModel& m = machineModel();
  const int simple = int(Proto::kSimple);
  printf(
      "# cluster: %d node(s) x %d rank(s) = %d ranks; link %.1f Gbit/s (%.3f GB/s each way), "
      "hop %.2f us; memory %.2f GB/s per rank, node hand-off %.3f us (model: %s)\n",
      spec.nodes, spec.perNode, spec.nodes * spec.perNode, m.netBwGBs * 8, m.netBwGBs, m.netHopUs,
      m.bwGBs[simple], m.hopUs[simple], m.calibrated ? "calibrated here" : "built-in defaults");
  printf(
      "# time: the model's prediction for the tuner's choice; busbw as nccl-tests; ideal: seed "
      "001\n");
  const char* last = "";
  for (const ClusterRow& r : rows) {
    if (strcmp(last, r.collective) != 0) {
      printf("\n# %s\n%12s %10s %7s %3s %14s %12s %12s %12s %6s\n", r.collective, "bytes",
             "algorithm", "proto", "ch", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "ideal(GB/s)",
             "eff%");
      last = r.collective;
    }
    printf("%12zu %10s %7s %3d %14.2f %12.3f %12.3f %12.3f %6.1f\n", r.bytes, r.algorithm,
           r.protocol, r.nchannels, r.us, r.algBw, r.busBw, r.idealBusBw,
           chorus_bench::efficiencyPercent(r.busBw, r.idealBusBw));
  }
  // Which algorithm wins where: contiguous size ranges per collective.
  printf("\n# the tuner's choice by size\n");
  for (size_t i = 0; i < rows.size();) {
    std::string line = std::string(rows[i].collective) + ":";
    size_t j = i;
    while (j < rows.size() && strcmp(rows[j].collective, rows[i].collective) == 0) {
      size_t e = j;
      while (e + 1 < rows.size() && strcmp(rows[e + 1].collective, rows[j].collective) == 0 &&
             strcmp(rows[e + 1].algorithm, rows[j].algorithm) == 0 &&
             strcmp(rows[e + 1].protocol, rows[j].protocol) == 0)
        ++e;
      line += " " + std::string(rows[j].algorithm) + "/" + rows[j].protocol + " " +
              chorus_bench::bytesText(rows[j].bytes) +
              (e > j ? "-" + chorus_bench::bytesText(rows[e].bytes) : "") + ";";
      j = e + 1;
    }
    line.pop_back();
    printf("%s\n", line.c_str());
    i = j;
  }
}

void writeClusterJson(FILE* f, const ClusterSpec& spec, const std::vector<ClusterRow>& rows) {
  const MachineModel& m = machineModel();
  fprintf(f,
          "{\"nodes\": %d, \"ranks_per_node\": %d, \"link_gbps\": %.6g, \"link_hop_us\": %.6g, "
          "\"mem_gbs\": %.6g, \"node_hop_us\": %.6g, \"rows\": [",
          spec.nodes, spec.perNode, m.netBwGBs * 8, m.netHopUs, m.bwGBs[int(Proto::kSimple)],
          m.hopUs[int(Proto::kSimple)]);
  for (size_t i = 0; i < rows.size(); ++i) {
    const ClusterRow& r = rows[i];
    fprintf(f,
            "%s\n  {\"collective\": \"%s\", \"bytes\": %zu, \"algorithm\": \"%s\", \"protocol\": "
            "\"%s\", \"nchannels\": %d, \"predicted_us\": %.6g, \"algbw\": %.6g, \"busbw\": %.6g, "
            "\"ideal_busbw\": %.6g}",
            i ? "," : "", r.collective, r.bytes, r.algorithm, r.protocol, r.nchannels, r.us,
            r.algBw, r.busBw, r.idealBusBw);
  }
  fprintf(f, "\n]}\n");
}

}  // namespace chorus
