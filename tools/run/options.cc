#include "options.h"

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

#include "run_common.h"

namespace chorusrun {

void PrintUsage(FILE* f) {
  std::fprintf(
      f,
      "Usage: %s [options] -np N PROGRAM [ARGS...]\n"
      "Start N local ranks of PROGRAM as one Chorus job.\n"
      "\n"
      "Options:\n"
      "  -np N, -n N      number of ranks to start (required, N >= 1)\n"
      "  --no-prefix      do not prefix the ranks' output lines with \"[rank] \"\n"
      "  --nodes Q        emulate Q nodes on this machine: ranks are split into Q contiguous\n"
      "                   blocks (the first N %% Q get one more rank), each with its own\n"
      "                   CHORUS_HOSTID, so they talk TCP between blocks\n"
      "  --bind-to B      core: pin rank i to core i mod cores; none; auto (default): core when\n"
      "                   the ranks fit the cores, as Open MPI does\n"
      "  --netns          with --nodes: each node in its own network namespace, joined by\n"
      "                   veth links to a bridge (needs root and iproute2; removed on exit)\n"
      "  --link-rate R    with --netns: shape each node's link to R in both directions\n"
      "                   (tc rate syntax, e.g. 1gbit)\n"
      "  --link-mtu M     with --netns: the links' MTU in bytes, 576-65535 (default 1500;\n"
      "                   9000 for jumbo frames)\n"
      "  --link-burst B   with --link-rate: the token bucket's burst in bytes, 2048-67108864\n"
      "                   (default 262144: bytes a link lets through at once after idling)\n"
      "  --timeout SEC    kill every rank and exit 124 after SEC seconds\n"
      "  -x NAME=VALUE    set NAME=VALUE in every rank's environment (repeatable);\n"
      "                   -x NAME passes chorusrun's own value of NAME\n"
      "  -h, --help       show this help and exit\n"
      "Send chorusrun SIGUSR1 (CHORUS_STATUS_SIGNAL) to have every rank print its status\n"
      "report: the collective in flight, its sequence number, the peer it waits for and\n"
      "the last operations it completed.\n"
      "Options end at the first argument that is not an option (or after \"--\").\n"
      "\n"
      "Every rank gets CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK, CHORUS_LOCAL_NRANKS,\n"
      "CHORUS_COMM_ID (127.0.0.1:PORT, where rank 0 listens) and CHORUS_SECRET.\n"
      "\n"
      "Exit status: 0 when every rank exits 0; otherwise the status of the first rank\n"
      "that failed (128+SIG if it was killed by a signal), 124 on --timeout, 130/143 when\n"
      "chorusrun is interrupted by SIGINT/SIGTERM, 127 if PROGRAM is not found (126 if it\n"
      "cannot be executed), 2 for usage errors.\n",
      kProg);
}

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", kProg, msg.c_str());
  PrintUsage(stderr);
  std::exit(kUsageExit);
}

bool ValidEnvName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  });
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  bool have_np = false;
  int i = 1;
  // Returns the value of an option: the part after '=' in "--opt=value", else the next argument.
  auto value_of = [&](std::string_view opt, const char* inline_value) -> const char* {
    if (inline_value != nullptr) return inline_value;
    if (i + 1 >= argc) UsageError("option " + std::string(opt) + " needs an argument");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM
    std::string_view name = arg;
    const char* inline_value = nullptr;
    if (arg.starts_with("--")) {
      if (size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = argv[i] + eq + 1;
      }
    }
    if (name == "-h" || name == "--help") {
      PrintUsage(stdout);
      std::exit(0);
    } else if (name == "-np" || name == "-n" || name == "--np") {
      const char* v = value_of(name, inline_value);
      long n = 0;
      if (!ParseInt(v, 1, 1 << 20, &n)) {
        UsageError("invalid number of ranks '" + std::string(v) + "' (need an integer >= 1)");
      }
      o.nranks = static_cast<int>(n);
      have_np = true;
    } else if (name == "--nodes") {
      const char* v = value_of(name, inline_value);
      long q = 0;
      if (!ParseInt(v, 1, 1 << 20, &q)) {
        UsageError("invalid number of nodes '" + std::string(v) + "' (need an integer >= 1)");
      }
      o.nnodes = static_cast<int>(q);
    } else if (name == "--bind-to") {
      o.bindTo = value_of(name, inline_value);
      if (o.bindTo != "core" && o.bindTo != "none" && o.bindTo != "auto")
        UsageError("--bind-to takes core, none or auto");
    } else if (name == "--netns") {
      if (inline_value != nullptr) UsageError("option --netns takes no argument");
      o.netns = true;
    } else if (name == "--link-rate") {
      o.linkRate = value_of(name, inline_value);
    } else if (name == "--link-mtu") {
      const char* v = value_of(name, inline_value);
      long m = 0;
      if (!ParseInt(v, 576, 65535, &m)) {
        UsageError("invalid --link-mtu '" + std::string(v) + "' (need bytes, 576-65535)");
      }
      o.linkMtu = static_cast<int>(m);
    } else if (name == "--link-burst") {
      const char* v = value_of(name, inline_value);
      long b = 0;
      if (!ParseInt(v, 2048, 64L << 20, &b)) {
        UsageError("invalid --link-burst '" + std::string(v) + "' (need bytes, 2048-67108864)");
      }
      o.linkBurst = b;
    } else if (name == "--no-prefix") {
      if (inline_value != nullptr) UsageError("option --no-prefix takes no argument");
      o.prefix = false;
    } else if (name == "--timeout") {
      const char* v = value_of(name, inline_value);
      double t = 0;
      if (!ParseSeconds(v, &t)) {
        UsageError("invalid timeout '" + std::string(v) + "' (need a number of seconds > 0)");
      }
      o.timeout_s = t;
    } else if (name == "-x") {
      std::string_view v = value_of(name, inline_value);
      size_t eq = v.find('=');
      std::string env_name(v.substr(0, eq));
      if (!ValidEnvName(env_name)) {
        UsageError("invalid -x argument '" + std::string(v) + "' (need NAME=VALUE)");
      }
      if (eq == std::string_view::npos) {
        const char* cur = std::getenv(env_name.c_str());
        if (cur == nullptr) UsageError("-x " + env_name + ": " + env_name + " is not set");
        o.extra_env.emplace_back(env_name, cur);
      } else {
        o.extra_env.emplace_back(env_name, std::string(v.substr(eq + 1)));
      }
    } else {
      UsageError("unknown option '" + std::string(arg) + "'");
    }
  }
  if (!have_np) UsageError("missing -np N");
  if (o.nnodes > o.nranks) UsageError("--nodes cannot exceed the number of ranks");
  if (o.netns && o.nnodes == 0) UsageError("--netns needs --nodes Q");
  if (!o.linkRate.empty() && !o.netns) UsageError("--link-rate needs --netns");
  if (o.linkMtu != 0 && !o.netns) UsageError("--link-mtu needs --netns");
  if (o.linkBurst != 0 && o.linkRate.empty()) UsageError("--link-burst needs --link-rate");
  if (i >= argc) UsageError("missing PROGRAM");
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  return o;
}

}  // namespace chorusrun
