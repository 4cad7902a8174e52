// chorusrun's command line: the options and their parsing (usage errors exit with kUsageExit).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorusrun {

struct Options {
  int nranks = 0;
  int nnodes = 0;               // --nodes Q: emulated nodes (0: not emulated)
  bool netns = false;           // --netns: a network namespace per emulated node
  std::string bindTo = "auto";  // --bind-to core|none|auto (auto: core when ranks <= cores)
  std::string linkRate;         // --link-rate RATE: tc shaping of every node's link
  int linkMtu = 0;              // --link-mtu BYTES: the links' MTU (0: veth's 1500)
  long linkBurst = 0;           // --link-burst BYTES: tc's burst (0: EmulatedNet::kDefaultBurst)
  bool prefix = true;
  std::optional<double> timeout_s;
  // -x NAME=VALUE; a -x NAME without '=' copies NAME from chorusrun's own environment.
  std::vector<std::pair<std::string, std::string>> extra_env;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

void PrintUsage(FILE* f);
bool ValidEnvName(std::string_view name);
Options ParseOptions(int argc, char** argv);

}  // namespace chorusrun
