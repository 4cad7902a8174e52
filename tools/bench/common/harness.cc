// benchMain (harness.h): parses the flags, sets up the process (unique id, devices, nodes,
// environment, -T watchdog), runs one RankRunner per thread and writes the JSON document.
#include "harness.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "args.h"
#include "calibration.h"
#include "clocks.h"
#include "device.h"
#include "json.h"
#include "rank_runner.h"

extern char** environ;

namespace chorus_bench {

namespace {

void collectEnv(RunInfo* run) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("CHORUS_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    run->env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::sort(run->env.begin(), run->env.end());
}

// Q from CHORUS_NNODES (1 when unset).
void setupNodes(Process* p) {
  const char* nn = std::getenv("CHORUS_NNODES");
  if (nn != nullptr && *nn != '\0') {
    const int q = std::atoi(nn);
    if (q >= 1) p->nnodes = q;
  }
}

}  // namespace

int benchMain(int argc, char** argv, const CollDesc& desc) {
  auto p = std::make_unique<Process>();
  p->desc = &desc;
  p->run.collective = desc.name;
  p->run.startTime = isoNow();
  std::string error;
  const char* prog = argc > 0 ? argv[0] : desc.name;
  switch (parseArgs(argc, argv, &p->opts, &error)) {
    case ParseStatus::kHelp:
      printUsage(stdout, prog);
      return 0;
    case ParseStatus::kError:
      if (error == "invalid option") {  // getopt_long has said which
        printUsage(stderr, prog);
      } else {
        std::fprintf(stderr, "%s: %s\nRun '%s -h' for the options.\n", prog, error.c_str(), prog);
      }
      return 1;
    case ParseStatus::kOk:
      break;
  }
  const Options& o = p->opts;

  const chorusResult_t r = chorusUniqueIdFromEnv(&p->id, &p->procRank, &p->nprocs);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "%s: chorusUniqueIdFromEnv failed: %s (%s)\n", prog,
                 chorusGetErrorString(r), chorusGetLastError(nullptr));
    return 1;
  }
  p->nranks = p->nprocs * o.nThreads;
  if (o.device) {
    std::string why;
    if (!deviceAvailable(&p->ndevices, &why)) {
      std::fprintf(stderr, "%s: --device: %s\n", prog, why.c_str());
      return 2;
    }
  }
  if (desc.hasRoot && !o.allRoots && o.root >= p->nranks) {
    if (p->procRank == 0) {
      std::fprintf(stderr, "%s: invalid root %d: there are %d ranks\n", prog, o.root, p->nranks);
    }
    return 1;
  }
  setupNodes(p.get());
  collectEnv(&p->run);
  int version = 0;
  chorusGetVersion(&version);
  p->run.versionCode = version;
  p->run.version = std::to_string(version / 10000) + "." + std::to_string((version / 100) % 100) +
                   "." + std::to_string(version % 100);
  p->run.options = &p->opts;
  p->run.nranks = p->nranks;
  p->run.nprocs = p->nprocs;
  p->run.nnodes = p->nnodes;
  p->run.calibrated = o.calibrate;
  p->run.calibrationBytes = o.calibrateBytes;
  p->run.calibrationIters = kCalibrationIters;

  p->watchdog.start(o.timeoutSec);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.nThreads; ++t) {
    threads.emplace_back([&p, t] {
      RankRunner runner(p.get(), t);
      const int rc = runner.run();
      if (rc != 0) p->exitCode.store(rc);
    });
  }
  for (std::thread& t : threads) t.join();
  p->watchdog.stop();

  if (p->procRank == 0 && !o.jsonFile.empty()) {
    p->run.endTime = isoNow();
    if (!writeJsonFile(o.jsonFile, p->run)) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", prog, o.jsonFile.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  return p->exitCode.load();
}

}  // namespace chorus_bench
