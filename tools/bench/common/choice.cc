// What the library runs for a call of the tool's collective (harness.h): tunerCollective and
// describeChoice, the "algo" columns of the table and the JSON.
#include <atomic>
#include <cstdio>
#include <string>

#include "harness.h"

namespace chorus_bench {

std::string tunerCollective(const char* toolName) {
  std::string s;
  for (const char* c = toolName; *c != '\0'; ++c) {
    if (*c != '_') s += *c;
  }
  const std::string suffix = "perf";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    s.resize(s.size() - suffix.size());
  }
  return s;
}

Choice describeChoice(const CollDesc& desc, chorusComm_t comm, size_t count,
                      chorusDataType_t type) {
  const std::string coll = tunerCollective(desc.name);
  if (coll == "sendrecv") return Choice{"direct", "simple", 1, 0.0};
  chorusChoice_t c{};
  const chorusResult_t r = chorusTunerChoice(comm, coll.c_str(), count, type, &c);
  if (r != chorusSuccess) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      std::fprintf(stderr, "chorus bench: chorusTunerChoice(\"%s\") failed: %s (%s)\n",
                   coll.c_str(), chorusGetErrorString(r), chorusGetLastError(nullptr));
    }
    return Choice{"unknown", "unknown", 0, 0.0};
  }
  chorusChoice_t inPlace{};
  const double inPlaceUs =
      chorusTunerChoiceInPlace(comm, coll.c_str(), count, type, &inPlace) == chorusSuccess
          ? inPlace.predictedUs
          : 0.0;
  return Choice{c.algorithm, c.protocol, c.nchannels, c.predictedUs, inPlaceUs};
}

}  // namespace chorus_bench
