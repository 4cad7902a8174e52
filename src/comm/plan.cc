#include "comm/plan.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace chorus {

namespace {
// Set once, at load time, by algo/table.cc (a static initializer); read only afterwards.
const AlgoDesc* const* gAlgos = nullptr;
int gNumAlgos = 0;
}  // namespace

void registerAlgos(const AlgoDesc* const* table, int n) {
  gAlgos = table;
  gNumAlgos = n;
}

int numAlgos() {
  return gNumAlgos;
}

const AlgoDesc& algoDesc(Algo a) {
  if (int(a) < 0 || int(a) >= gNumAlgos) {
    // A program that links the tuner without the algorithms (algo/table.cc), or a bad index.
    fprintf(stderr, "chorus: algorithm %d is not in the algorithm table (%d registered)\n", int(a),
            gNumAlgos);
    abort();
  }
  return *gAlgos[int(a)];
}

const char* algoName(Algo a) {
  return int(a) >= 0 && int(a) < gNumAlgos ? gAlgos[int(a)]->name : "?";
}

int algoByName(const char* name) {
  for (int a = 0; a < gNumAlgos; ++a)
    if (strcmp(name, gAlgos[a]->name) == 0) return a;
  return -1;
}

void PlanCache::clear() {
  for (auto& perKind : classes)
    for (auto& c : perKind) c.state = 0;
}

}  // namespace chorus
