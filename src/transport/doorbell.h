// Sleeping on a rank's doorbell (fifo.h) instead of polling, for waits that last: the waiter
// arms the bell (counts itself in `sleeping` once per wait, then reads the bell), re-checks its
// condition, then sleeps until the bell changes, a timeout, or a signal; it disarms when the
// wait ends. Publishers ring armed bells (notifySleeper in fifo.h).
#pragma once

#include <cstdint>

#include "transport/fifo.h"

namespace chorus {

// Registers this process for membarrier's global expedited barrier (once; true when it is):
// then its publications to a doorbell with heavyArm set need no fence (fifo.h postFence).
bool registerHeavyBarrier();
void armDoorbell(Doorbell* d, uint32_t* bellValue, bool first);
void sleepOnDoorbell(Doorbell* d, uint32_t bellValue, long timeoutNs);
void disarmDoorbell(Doorbell* d);

}  // namespace chorus
