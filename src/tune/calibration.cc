#include "tune/calibration.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "base/debug.h"
#include "base/param.h"
#include "chorus/chorus.h"  // CHORUS_VERSION_STRING (chorus/version.h)

namespace chorus {

std::string machineKey() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string cpu = "unknown";
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return std::string(host) + "|" + cpu + "|" + std::to_string(std::thread::hardware_concurrency());
}

std::string tuneCachePath() {
  std::string dir = envStr("XDG_CACHE_HOME");
  if (dir.empty()) dir = envStr("HOME", "/tmp") + "/.cache";
  return dir + "/chorus/tune.txt";
}

MachineModel defaultModel() {
  // Measured by chorus-tune on the 2-core reference VM (docs/performance.md, quiet); a cache
  // written by chorus-tune on this machine replaces them.
  MachineModel m{};
  m.hopUs[int(Proto::kSimple)] = 0.569821;
  m.baseUs[int(Proto::kSimple)] = 0.1607;
  m.bwGBs[int(Proto::kSimple)] = 6.94421;
  m.hopUs[int(Proto::kLL)] = 0.604534;
  m.baseUs[int(Proto::kLL)] = 0.1607;
  m.bwGBs[int(Proto::kLL)] = 2.90505;
  m.channelGain = 0;
  // The 2-channel terms since the persistent channel workers (docs/performance.md "Channel
  // workers (persistent)"): the quiet reference's 2-channel excess (measured when every call
  // started a thread per extra channel) times the after/before ratio of the same quantity,
  // measured by chorus-tune on the two builds interleaved, 6 runs each (medians): the 8 KiB
  // overhead 87.3 -> 45.1 us (38.4333 x 0.517 = 19.86) and the 8 B ring excess over 1 channel,
  // Simple 98.4 -> 4.05 us (x 0.0412), LL 90.75 -> 8.5 us (x 0.0937).
  m.channelWakeUs = 19.86;
  // Where the per-byte time changes (docs/performance.md "The model against the measurement"):
  // 2 ranks' AllReduce moved 25-35 GB/s of its size from 16 KiB to 1 MiB and 5-9 GB/s from
  // 2 MiB, where the fitted bandwidths (7-10 GB/s) were measured.
  m.cacheBytes = double(size_t(1) << 20);
  m.cacheBwGain = 3.0;
  m.netHopUs = 25;  // loopback / LAN TCP hand-off through the proxy
  m.netBwGBs = 1.0;
  // Each calibrated algorithm's AllReduce terms: its descriptor's (AlgoDesc::calibration).
  for (int a = 0; a < numAlgos(); ++a) {
    const AllReduceCalibration* cal = algoDesc(Algo(a)).calibration;
    if (cal == nullptr) continue;
    for (int p = 0; p < kNumProtos; ++p)
      for (int ch = 0; ch < kCalibratedChannels; ++ch)
        if (cal->fit[p][ch].bwGBs > 0)
          m.allreduce[a][p][ch] = {cal->fit[p][ch].hopUs, cal->fit[p][ch].bwGBs, true};
  }
  m.calibrated = false;
  return m;
}

MachineModel loadOrDefaultModel() {
  MachineModel m = defaultModel();
  if (envInt("CHORUS_TUNE_CACHE_DISABLE", 0)) return m;
  std::ifstream f(tuneCachePath());
  if (!f) {
    CHORUS_INFO(-1, "tuner: no cache at %s, using built-in defaults (run chorus-tune)",
                tuneCachePath().c_str());
    return m;
  }
  std::string line, machine, version;
  MachineModel c = m;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "machine")
      std::getline(in >> std::ws, machine);
    else if (key == "version")
      in >> version;
    else if (key == "simple")
      in >> c.hopUs[0] >> c.baseUs[0] >> c.bwGBs[0];
    else if (key == "ll")
      in >> c.hopUs[1] >> c.baseUs[1] >> c.bwGBs[1];
    else if (key == "channels")
      in >> c.channelGain >> c.channelWakeUs;
    else if (key == "net")
      in >> c.netHopUs >> c.netBwGBs;
    else if (key == "cache")
      in >> c.cacheBytes >> c.cacheBwGain;
    else if (key == "allreduce") {
      std::string algo, proto;
      int ch = 0;
      double hop = 0, bw = 0;
      in >> algo >> proto >> ch >> hop >> bw;
      for (int a = 0; a < numAlgos(); ++a)
        for (int p = 0; p < kNumProtos; ++p)
          if (algo == algoName(Algo(a)) && proto == protoName(Proto(p)) && ch >= 1 &&
              ch <= kCalibratedChannels && bw > 0)
            c.allreduce[a][p][ch - 1] = {hop, bw, true};
    }
  }
  if (machine != machineKey() || version != CHORUS_VERSION_STRING) {
    CHORUS_WARN(-1,
                "tuner: ignoring %s: written for '%s' version %s, this is '%s' version %s; "
                "run chorus-tune again",
                tuneCachePath().c_str(), machine.c_str(), version.c_str(), machineKey().c_str(),
                CHORUS_VERSION_STRING);
    return m;
  }
  c.calibrated = true;
  return c;
}

bool saveModel(const MachineModel& m, std::string* error) {
  std::string path = tuneCachePath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path);
  if (!f) {
    *error = "cannot write " + path;
    return false;
  }
  f << "# chorus-tune: hop_us base_us bandwidth_GBps per protocol; channel gain and wake cost\n";
  f << "machine " << machineKey() << "\n";
  f << "version " << CHORUS_VERSION_STRING << "\n";
  f << "simple " << m.hopUs[0] << " " << m.baseUs[0] << " " << m.bwGBs[0] << "\n";
  f << "ll " << m.hopUs[1] << " " << m.baseUs[1] << " " << m.bwGBs[1] << "\n";
  f << "channels " << m.channelGain << " " << m.channelWakeUs << "\n";
  f << "net " << m.netHopUs << " " << m.netBwGBs << "\n";
  f << "cache " << m.cacheBytes << " " << m.cacheBwGain << "\n";
  for (int a = 0; a < numAlgos(); ++a)
    for (int p = 0; p < kNumProtos; ++p)
      for (int ch = 1; ch <= kCalibratedChannels; ++ch) {
        const ChoiceFit& fit = m.allreduce[a][p][ch - 1];
        if (fit.measured)
          f << "allreduce " << algoName(Algo(a)) << " " << protoName(Proto(p)) << " " << ch << " "
            << fit.hopUs << " " << fit.bwGBs << "\n";
      }
  return bool(f);
}

}  // namespace chorus
