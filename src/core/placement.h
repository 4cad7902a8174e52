// Placement of a rank on its node's cores: where it runs when nothing placed it, how long its
// waits spin and poll, and the tuner's view of oversubscription. The last phase of communicator
// init (core/init.cc).
#pragma once

#include <vector>

struct chorusComm;

namespace chorus {

// The CPUs the calling thread may run on, ascending (empty if the kernel does not say): what a
// rank tells its peers in the exchange (PeerInfo::cpuSetDigest).
std::vector<int> threadCpus();

// Marks the calling thread as a non-blocking init's thread: it binds nothing.
void markInitThread();

struct PeerInfo;
// Shape::channelCpus from every rank's exchanged CPU set (the same on every rank).
int channelCpusOf(const std::vector<PeerInfo>& peers);

void placeRank(chorusComm* c);

}  // namespace chorus
