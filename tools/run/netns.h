// Emulated cluster networking for chorusrun --netns: one network namespace per emulated node,
// each joined by a veth pair to a bridge in a private "switch" namespace (the host's own
// namespace is never touched), addresses 10.213.0.<node+1>/24, optional tc token-bucket shaping
// of both directions of every node's link (--link-rate), an optional MTU (--link-mtu). Namespaces
// carry the launcher's pid in their names; Teardown removes them, and CleanupStale removes those of
// launchers that died.
#pragma once

#include <string>
#include <vector>

namespace chorusrun {

class EmulatedNet {
 public:
  // A shaped link's token bucket lets this many bytes through at once after idling (tc's burst).
  static constexpr long kDefaultBurst = 256 << 10;
  // Needs root and iproute2. On failure, *err says why and nothing is left behind. mtu 0 keeps
  // veth's default (1500); burst 0 is kDefaultBurst.
  bool Setup(int nodes, const std::string& linkRate, int mtu, long burst, std::string* err);
  void Teardown();
  static void CleanupStale();

  bool active() const { return !nodeNs_.empty(); }
  const std::string& nodeNamespace(int node) const { return nodeNs_[size_t(node)]; }
  std::string nodeAddress(int node) const { return "10.213.0." + std::to_string(node + 1); }

 private:
  std::string switchNs_;
  std::vector<std::string> nodeNs_;
};

}  // namespace chorusrun
