#include "comm/plan.h"

namespace chorus {

const char* algoName(Algo a) {
  switch (a) {
    case Algo::kRing:
      return "ring";
    case Algo::kTree:
      return "tree";
    case Algo::kChain:
      return "chain";
    case Algo::kDirect:
      return "direct";
    case Algo::kNaive:
      return "naive";
    case Algo::kHier:
      return "hier";
    case Algo::kOneShot:
      return "oneshot";
    case Algo::kTwoShot:
      return "twoshot";
    case Algo::kCma:
      return "cma";
  }
  return "?";
}

void PlanCache::clear() {
  for (auto& perKind : classes)
    for (auto& c : perKind) c.state = 0;
}

}  // namespace chorus
