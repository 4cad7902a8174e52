// /dev/shm bookkeeping: the entries a test leaves behind (Chorus's own, held by no other
// process), and their removal.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace ctest {

// Names in /dev/shm.
std::set<std::string> shmEntries();
// The entries named after one of `pids` (segments are /chorus-<pid>-<rank>-<random>).
std::vector<std::string> shmOf(const std::vector<pid_t>& pids);
// Entries of /dev/shm (of this user) that are not in `before` and that no other live process
// has open or mapped (those belong to whoever else runs on this machine), after waiting up to
// settleSeconds for them to disappear.
std::vector<std::string> leakedShm(const std::set<std::string>& before, double settleSeconds = 3);
// Unlinks /dev/shm/<name> for each name (after a leak was reported, to restore the machine).
void removeShm(const std::vector<std::string>& names);

}  // namespace ctest
