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
// first on a hang), killed after T + 30 s.
inline CommandResult launchWorkers(const std::vector<std::string>& launcherArgs, int np,
                                   const std::vector<std::string>& workerArgs, double timeout) {
  std::vector<std::string> argv = {CHORUSRUN_PATH, "--timeout",
                                   std::to_string(static_cast<int>(timeout * timeoutScale()))};
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
