// chorusGetBuildInfo: what this build of the library holds (version, CUDA backend, the algorithm
// table's names, the reduce kernels' instruction-set builds), as "key=value" lines. In core/, the
// top layer, because it reads the algorithm table (algo/) and the kernels' choice (reduce/).
#include <string>

#include "algo/algo.h"
#include "chorus/chorus.h"
#include "comm/plan.h"
#include "reduce/reduce.h"

using namespace chorus;

namespace {

std::string makeBuildInfo() {
  std::string s = "version=" CHORUS_VERSION_STRING "\n";
#ifdef CHORUS_HAVE_CUDA
  s += "cuda=yes\n";
#else
  s += "cuda=no\n";
#endif
  s += "algorithms=";
  for (int a = 0; a < numAlgos(); ++a) {
    if (a > 0) s += ",";
    s += algoName(Algo(a));
  }
  s += "\nsimd=";
  s += kernelIsaName(kernelIsaFor(chorusFloat32, chorusSum));
  s += "\nsimd_widest=";
  s += kernelIsaName(bestKernelIsa());
  s += "\nsimd_cpu=";
  const char* sep = "";
  for (KernelIsa isa : {KernelIsa::kPortable, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (!kernelIsaSupported(isa)) continue;
    s += sep;
    s += kernelIsaName(isa);
    sep = ",";
  }
  s += "\n";
  return s;
}

}  // namespace

const char* chorusGetBuildInfo(void) {
  static const std::string info = makeBuildInfo();  // thread-safe, made once
  return info.c_str();
}
