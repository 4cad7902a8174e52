// The network link a communicator that spans nodes runs over, measured at init (the last phase,
// after placement): the tuner's across-node terms (Shape::netHopUs, Shape::netBwGBs) then come
// from this communicator's own link, not from the machine model's constants.
#pragma once

struct chorusComm;

namespace chorus {

// Bytes per node of the probe's AllReduces (CHORUS_NET_PROBE_BYTES).
constexpr long kNetProbeBytes = 1L << 20;

// Sets c->shape.netHopUs / netBwGBs on every rank alike. One node: nothing (the machine model's
// terms stay). CHORUS_NET_GBS / CHORUS_NET_HOP_US give a term without measuring it;
// CHORUS_NET_PROBE=0 measures nothing. Collective: every rank of the communicator calls it,
// with the same environment.
void probeNetwork(chorusComm* c);

}  // namespace chorus
