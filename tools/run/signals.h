// Signals: handlers only set a flag and poke the self-pipe that the launcher's loop polls.
#pragma once

#include <signal.h>

#include "options.h"

namespace chorusrun {

extern int g_wake_pipe[2];
extern volatile sig_atomic_t g_got_signal[NSIG];
void OnSignal(int sig);

// Signals chorusrun forwards to the ranks. SIGHUP is left alone when it was ignored at start
// (nohup): then it stays ignored for chorusrun and the ranks alike. SIGINT and SIGTERM are always
// caught, even in a background job of a non-interactive shell (where SIGINT starts out ignored).
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The status signal (docs/reliability.md "Status reports"): the ranks' CHORUS_STATUS_SIGNAL
// (USR1 by default, USR2, a number, or 0/none/off). chorusrun passes it on to every rank, each
// of which prints its status report; the ranks start with it ignored, so that one arriving
// before a rank's library installed its handler does no harm. 0: not handled.
int StatusSignal(const Options& opts);

}  // namespace chorusrun
