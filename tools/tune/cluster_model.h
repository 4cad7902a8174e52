// chorus-tune --cluster: the tuner's model applied to a described cluster that need not exist
// here (cluster_model.cc).
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <vector>

#include "tune/tuner.h"

namespace chorus {

struct ClusterSpec {
  int nodes = 1;
  int perNode = 2;
  double linkGbps = 25;  // one node's link, each direction
  double linkUs = 0;     // one network hand-off; 0: the model's
  double memGBs = 0;     // one rank's memory (Simple protocol) bandwidth; 0: the model's
  double hopUs = 0;      // one hand-off inside a node (Simple); 0: the model's
  int channels = 2;      // the communicator's channels (chorusrun's default)
  size_t minBytes = 8;
  size_t maxBytes = size_t(1) << 30;
};

struct ClusterRow {
  const char* collective;
  size_t bytes;
  const char* algorithm;
  const char* protocol;
  int nchannels;
  double us, algBw, busBw, idealBusBw;
};

// "16x8" -> 16 nodes of 8 ranks.
bool parseClusterShape(const char* s, int* nodes, int* perNode);
// `base` with the described link, memory bandwidth and hand-off in place of its own.
std::unique_ptr<MachineModel> clusterModel(const MachineModel& base, const ClusterSpec& spec);
Shape clusterShape(const ClusterSpec& spec);
// Rows per collective ("all" or one name) and size (x4 steps), under the machine model in force
// (setMachineModel(*clusterModel(...)) first).
std::vector<ClusterRow> predictCluster(const ClusterSpec& spec, const char* only);
void printCluster(const ClusterSpec& spec, const std::vector<ClusterRow>& rows);
void writeClusterJson(FILE* f, const ClusterSpec& spec, const std::vector<ClusterRow>& rows);

}  // namespace chorus
