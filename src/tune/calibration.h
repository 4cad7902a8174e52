// The tuner's measured parameters, cached per machine and library version under
// $XDG_CACHE_HOME/chorus (default ~/.cache/chorus) by chorus-tune. A cache written on another
// machine or by another library version is ignored (with a warning), never used stale.
#pragma once

#include <memory>
#include <string>

#include "tune/tuner.h"

namespace chorus {

// The algorithm name of a reference_fits.inc row, and the key of a cache line, that holds a
// collective's in-place ratios (MachineModel::inPlace) rather than a choice's times.
constexpr const char* kInPlaceRow = "inplace";

// This machine's identity as the cache records it: hostname, CPU model, cores.
std::string machineKey();
std::string tuneCachePath();
// The cached model if valid for this machine and version, else built-in defaults. Both on the
// heap: a model holds every measured fit (about 225 KiB).
std::unique_ptr<MachineModel> loadOrDefaultModel();
std::unique_ptr<MachineModel> defaultModel();
// Which set of built-in fits defaultModel() takes: CHORUS_TUNE_REFERENCE where it names one
// (zen5, zen4), else the set measured on this CPU's kind (builtInFitsFor, from /proc/cpuinfo).
const char* builtInFitsName();
// The set for a CPU: "zen4" for AMD family 25 (Zen 3, Zen 4), else "zen5" (Zen 5 and every CPU
// no set was measured on).
const char* builtInFitsFor(const std::string& vendor, int family);
bool saveModel(const MachineModel& m, std::string* error);
// The set of MachineModel::fits that holds the fits measured on `nranks` ranks: the one that
// already does, else the first empty one; -1 when every set holds another rank count.
int fitSetFor(const MachineModel& m, int nranks);

}  // namespace chorus
