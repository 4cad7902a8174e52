#include "signals.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chorusrun {

int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_got_signal[NSIG];

void OnSignal(int sig) {
  int saved = errno;
  if (sig > 0 && sig < NSIG) g_got_signal[sig] = 1;
  char c = 0;
  ssize_t r = write(g_wake_pipe[1], &c, 1);  // a full pipe already guarantees a wake-up
  (void)r;
  errno = saved;
}
int StatusSignal(const Options& opts) {
  const char* env = getenv("CHORUS_STATUS_SIGNAL");
  std::string v = env ? env : "";
  for (const auto& [name, value] : opts.extra_env)
    if (name == "CHORUS_STATUS_SIGNAL") v = value;
  for (char& ch : v) ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
  if (v.rfind("SIG", 0) == 0) v = v.substr(3);
  int sig = 0;
  if (v.empty() || v == "USR1") {
    sig = SIGUSR1;
  } else if (v == "USR2") {
    sig = SIGUSR2;
  } else {
    char* end = nullptr;
    const long n = strtol(v.c_str(), &end, 10);
    if (end != v.c_str() && *end == 0 && n > 0 && n < NSIG) sig = static_cast<int>(n);
  }
  for (int s : kForwardedSignals)
    if (sig == s) return 0;
  if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGPIPE) return 0;
  return sig;
}

}  // namespace chorusrun
