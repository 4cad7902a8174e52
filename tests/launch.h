// Launching the multi-process worker (tests/mp_worker.cc) through chorusrun, for the tests that
// run ranks as processes (test_multiprocess.cc, test_multinode.cc). Test-binary only: it needs
// the CHORUSRUN_PATH and MP_WORKER_PATH definitions of chorus_tests.
#pragma once

#include <string>
#include <vector>

#include "run_command.h"
#include "timing.h"

namespace ctest {

// chorusrun --timeout T [launcherArgs...] -np N mp_worker [workerArgs...] --timeout T-10, where
// T = timeout x CHORUS_TEST_TIMEOUT_SCALE for the launcher (the worker's own watchdog fires
// first on a hang), killed after T + 30 s. `wrapper`: a command that runs chorusrun (its argv
// follows the wrapper's), e.g. a shell that first sets a limit.
inline CommandResult launchWorkers(const std::vector<std::string>& launcherArgs, int np,
                                   const std::vector<std::string>& workerArgs, double timeout,
                                   const std::vector<std::string>& wrapper = {}) {
  std::vector<std::string> argv = wrapper;
  for (const std::string& a : {std::string(CHORUSRUN_PATH), std::string("--timeout"),
                               std::to_string(static_cast<int>(timeout * timeoutScale()))})
    argv.push_back(a);
  argv.insert(argv.end(), launcherArgs.begin(), launcherArgs.end());
  for (const std::string& a : {std::string("-np"), std::to_string(np), std::string(MP_WORKER_PATH)})
    argv.push_back(a);
  argv.insert(argv.end(), workerArgs.begin(), workerArgs.end());
  argv.push_back("--timeout");
  argv.push_back(std::to_string(static_cast<int>(timeout - 10)));
  return runCommand(argv, (timeout + 30) * timeoutScale());
}

// The end of a long output, for failure messages.
inline std::string outputTail(const std::string& s, size_t n = 6000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace ctest
