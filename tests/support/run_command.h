// Running a child command with a deadline and collecting its output.
#pragma once

#include <string>
#include <vector>

namespace ctest {

struct CommandResult {
  int exitCode = -1;  // exit status, or 128+signal
  bool timedOut = false;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};
// Runs argv (argv[0] a path) in a new process group; kills the group after timeoutSeconds.
CommandResult runCommand(const std::vector<std::string>& argv, double timeoutSeconds);

}  // namespace ctest
