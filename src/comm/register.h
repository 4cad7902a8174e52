// Buffers registered with a communicator (chorusCommRegister, core/mem.cc) as every rank sees
// them, for the zero-copy collectives (algo/zerocopy.cc). Registration is collective, so slot s
// names the same registration on every rank: a call publishes the slots its buffers lie in and
// each peer finds the region (and its own mapping of it) by that index, with no search and no
// system call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/plan.h"

struct chorusComm;

namespace chorus {

// How a rank's region can be reached.
enum RegKind : uint8_t {
  kRegNone = 0,    // a free slot / a buffer outside every registration
  kRegPlain = 1,   // ordinary memory: direct access only from the owner's process
  kRegMapped = 2,  // chorusMemAlloc memory: every process of the node maps it
};

// One rank's region of one registration.
struct RegRegion {
  uint64_t base = 0;  // its first byte in the owner's process
  uint64_t bytes = 0;
  RegKind kind = kRegNone;
  // Where this process reaches base: the owner's address (this rank, or a rank of this process),
  // inside this process's mapping of the owner's memory file, or null (not reachable).
  char* local = nullptr;
  void* map = nullptr;  // the mapping this process made of the owner's memory file (unmapped on
  size_t mapBytes = 0;  // deregistration), if any
};

struct RegState {
  int nranks = 0;
  int nslots = 0;                  // slots in use or freed, [0, nslots)
  std::vector<RegRegion> regions;  // [slot * nranks + rank]
  std::vector<uint8_t> slotLive;   // [slot]
  int live = 0;                    // live registrations (the same on every rank)
  bool oneProcess = false;         // every rank is a thread of this process
  uint64_t seq = 0;                // zero-copy calls run so far (algo/zerocopy.cc)
  TunerEnv fallbackEnv{};          // the communicator's overrides without the zero-copy algorithm
  std::vector<const char*> in;     // per call, per rank: its input as this process reaches it
  std::vector<char*> out;          // likewise its output
  RegRegion& at(int slot, int rank) {
    return regions[size_t(slot) * size_t(nranks) + size_t(rank)];
  }
};

// The slot of this rank's live registration holding [addr, addr + bytes), -1: none.
int regFind(RegState& st, int rank, const void* addr, size_t bytes);
// Unmaps every peer mapping and frees the state (communicator teardown).
void freeRegState(chorusComm* comm);

}  // namespace chorus
