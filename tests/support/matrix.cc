#include "matrix.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "checker.h"
#include "result_name.h"
#include "test_types.h"
#include "timing.h"
#include "values.h"
#include "watchdog.h"

namespace ctest {

const char* collName(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return "AllReduce";
    case Coll::Broadcast:
      return "Broadcast";
    case Coll::Reduce:
      return "Reduce";
    case Coll::AllGather:
      return "AllGather";
    case Coll::ReduceScatter:
      return "ReduceScatter";
    case Coll::AlltoAll:
      return "AlltoAll";
    case Coll::Gather:
      return "Gather";
    case Coll::Scatter:
      return "Scatter";
    case Coll::SendRecv:
      return "SendRecv";
  }
  return "?";
}

namespace {
std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

bool parseColl(const std::string& name, Coll* out) {
  for (Coll c : kAllColls) {
    if (lower(collName(c)) == lower(name)) {
      *out = c;
      return true;
    }
  }
  return false;
}

bool collReduces(Coll c) {
  return c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
}

bool collHasRoot(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter;
}

const char* patternName(Pattern p) {
  switch (p) {
    case Pattern::Ring:
      return "ring";
    case Pattern::AllPairs:
      return "all-pairs";
    case Pattern::Self:
      return "self";
    case Pattern::VarCounts:
      return "var-counts";
    case Pattern::TwoMessages:
      return "two-messages";
  }
  return "?";
}

const char* bigPolicyName(BigPolicy p) {
  switch (p) {
    case BigPolicy::None:
      return "none";
    case BigPolicy::Minimal:
      return "minimal";
    case BigPolicy::Subset:
      return "subset";
    case BigPolicy::Full:
      return "full";
  }
  return "?";
}

bool parseBigPolicy(const std::string& name, BigPolicy* out) {
  for (BigPolicy p : {BigPolicy::None, BigPolicy::Minimal, BigPolicy::Subset, BigPolicy::Full}) {
    if (lower(name) == bigPolicyName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

std::string Case::describe(int nranks) const {
  std::string s = std::string(collName(coll)) + " " + typeName(type);
  if (collReduces(coll)) s += std::string(" ") + opName(op);
  if (coll == Coll::SendRecv) s += std::string(" ") + patternName(pattern);
  s += " count=" + std::to_string(count);
  if (coll != Coll::SendRecv) s += inPlace ? " in-place" : " out-of-place";
  if (collHasRoot(coll)) s += " root=" + std::to_string(root);
  s += " nranks=" + std::to_string(nranks) + " seed=" + std::to_string(seed);
  return s;
}

std::vector<int> rootsFor(int nranks) {
  std::vector<int> roots;
  for (int r : {0, nranks - 1, nranks / 2}) {
    if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
  }
  return roots;
}

namespace {

template <class T>
void addUnique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

template <class T>
bool contains(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

struct Combo {
  chorusDataType_t type;
  chorusRedOp_t op;
  Pattern pattern;
};

// The (type, op / pattern) combinations of one collective at one count.
std::vector<Combo> combosFor(Coll coll, int collIndex, bool big, BigPolicy policy,
                             const std::vector<chorusDataType_t>& types,
                             const std::vector<chorusRedOp_t>& ops,
                             const std::vector<Pattern>& patterns, int nranks) {
  std::vector<Combo> out;
  const size_t T = types.size(), O = ops.size(), P = patterns.size();
  const size_t n = static_cast<size_t>(nranks), ci = static_cast<size_t>(collIndex);
  auto add = [&](chorusDataType_t t, chorusRedOp_t o, Pattern p) {
    for (const auto& c : out) {
      if (c.type == t && c.op == o && c.pattern == p) return;
    }
    out.push_back({t, o, p});
  };
  if (!big || policy == BigPolicy::Full) {
    for (auto t : types) {
      if (collReduces(coll)) {
        for (auto o : ops) add(t, o, Pattern::Ring);
      } else if (coll == Coll::SendRecv) {
        for (auto p : patterns) add(t, kNoOp, p);
      } else {
        add(t, kNoOp, Pattern::Ring);
      }
    }
    return out;
  }
  if (policy == BigPolicy::Subset) {
    if (collReduces(coll)) {
      // Every type with sum; float32 and int32 with every op; one rotating (type, op).
      if (contains(ops, chorusSum)) {
        for (auto t : types) add(t, chorusSum, Pattern::Ring);
      }
      for (auto t : {chorusFloat32, chorusInt32}) {
        if (!contains(types, t)) continue;
        for (auto o : ops) add(t, o, Pattern::Ring);
      }
      add(types[(n * 3 + ci) % T], ops[(n + 2 * ci) % O], Pattern::Ring);
    } else {
      // Data movement moves bytes: one type of each element size (1, 2, 4, 8 bytes), rotating
      // with the rank count and the collective; Send/Recv with a rotating pattern.
      size_t k = 0;
      for (size_t size : {1, 2, 4, 8}) {
        std::vector<chorusDataType_t> sameSize;
        for (auto t : types) {
          if (typeSize(t) == size) sameSize.push_back(t);
        }
        if (sameSize.empty()) continue;
        const chorusDataType_t t = sameSize[(n + ci) % sameSize.size()];
        add(t, kNoOp, coll == Coll::SendRecv ? patterns[(k++ + n) % P] : Pattern::Ring);
      }
    }
    return out;
  }
  // Minimal: two rotating combinations.
  if (collReduces(coll)) {
    add(types[(n + ci) % T], contains(ops, chorusSum) ? chorusSum : ops[0], Pattern::Ring);
    add(types[(n * 3 + ci + 5) % T], ops[(n + 2 * ci) % O], Pattern::Ring);
  } else if (coll == Coll::SendRecv) {
    add(types[(n + ci) % T], kNoOp, patterns[n % P]);
    add(types[(n + ci + 5) % T], kNoOp, patterns[(n + 1) % P]);
  } else {
    add(types[(n + ci) % T], kNoOp, Pattern::Ring);
    add(types[(n + ci + 5) % T], kNoOp, Pattern::Ring);
  }
  return out;
}

}  // namespace

std::vector<Case> enumerateCases(const MatrixOptions& opt, int nranks) {
  std::vector<chorusDataType_t> types = opt.types;
  if (types.empty()) types.assign(std::begin(kAllTypes), std::end(kAllTypes));
  std::vector<chorusRedOp_t> ops = opt.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  std::vector<Pattern> patterns = opt.patterns;
  if (patterns.empty()) patterns.assign(std::begin(kAllPatterns), std::end(kAllPatterns));
  const std::vector<int> roots = rootsFor(nranks);

  std::vector<Case> cases;
  uint64_t seed = opt.seed;
  for (Coll coll : opt.colls) {
    const int ci = static_cast<int>(coll);
    std::vector<bool> placements{false};
    if (coll != Coll::SendRecv) placements.push_back(true);
    const std::vector<int> collRoots = collHasRoot(coll) ? roots : std::vector<int>{0};
    for (size_t count : opt.counts) {
      const bool big = count >= kBigThreshold;
      if (big && opt.big == BigPolicy::None) continue;
      const auto combos = combosFor(coll, ci, big, opt.big, types, ops, patterns, nranks);
      const bool full = !big || opt.big == BigPolicy::Full;
      for (size_t k = 0; k < combos.size(); ++k) {
        Case c;
        c.coll = coll;
        c.type = combos[k].type;
        c.op = combos[k].op;
        c.pattern = combos[k].pattern;
        c.count = count;
        if (full) {
          for (bool inPlace : placements) {
            for (int root : collRoots) {
              c.inPlace = inPlace;
              c.root = root;
              c.seed = seed++;
              cases.push_back(c);
            }
          }
        } else {
          // One placement (alternating) and one root (rotating) per combination.
          c.inPlace = placements[(k + static_cast<size_t>(nranks)) % placements.size()];
          c.root = collRoots[(k + static_cast<size_t>(ci)) % collRoots.size()];
          c.seed = seed++;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Block

namespace {

struct Pool {
  static constexpr size_t kMaxBlocks = 8;
  static constexpr size_t kMaxBytes = size_t{256} << 20;
  std::vector<std::pair<size_t, unsigned char*>> free;  // (capacity, memory)
  size_t bytes = 0;
  ~Pool() {
    for (auto& f : free) ::operator delete[](f.second);
  }
};
thread_local Pool tPool;

}  // namespace

Block::Block(size_t bytes) : size_(bytes) {
  // The smallest free block that fits.
  auto& pool = tPool;
  size_t best = pool.free.size();
  for (size_t i = 0; i < pool.free.size(); ++i) {
    const size_t cap = pool.free[i].first;
    if (cap >= bytes && (best == pool.free.size() || cap < pool.free[best].first)) {
      best = i;
    }
  }
  if (best < pool.free.size()) {
    capacity_ = pool.free[best].first;
    p_ = pool.free[best].second;
    pool.bytes -= capacity_;
    pool.free.erase(pool.free.begin() + static_cast<std::ptrdiff_t>(best));
  } else {
    capacity_ = std::max<size_t>(bytes, 1);
    p_ = static_cast<unsigned char*>(::operator new[](capacity_));
  }
}

Block& Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    release();
    p_ = std::exchange(other.p_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void Block::release() {
  if (p_ == nullptr) return;
  auto& pool = tPool;
  // Keep big blocks (small ones are cheap to get again), within the pool's limits.
  if (capacity_ >= (size_t{64} << 10) && capacity_ <= Pool::kMaxBytes) {
    while (!pool.free.empty() &&
           (pool.free.size() >= Pool::kMaxBlocks || pool.bytes + capacity_ > Pool::kMaxBytes)) {
      pool.bytes -= pool.free.front().first;
      ::operator delete[](pool.free.front().second);
      pool.free.erase(pool.free.begin());
    }
    pool.free.emplace_back(capacity_, p_);
    pool.bytes += capacity_;
  } else {
    ::operator delete[](p_);
  }
  p_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// RankCase

RankCase::RankCase(const Case& c, int rank, int nranks)
    : c_(c),
      rank_(rank),
      nranks_(nranks),
      esz_(typeSize(c.type)),
      genOp_(collReduces(c.coll) ? c.op : kNoOp) {
  if (c_.coll == Coll::SendRecv) {
    setupSendRecv();
  } else {
    setupCollective();
  }
}

int RankCase::addBuffer(size_t elements, bool sentinel) {
  Buffer b;
  b.bytes = elements * esz_;
  b.mem = Block(b.bytes + 2 * kGuard);  // not initialised: written below
  std::memset(b.mem.get(), kGuardByte, kGuard);
  std::memset(b.mem.get() + kGuard + b.bytes, kGuardByte, kGuard);
  if (sentinel) std::memset(b.mem.get() + kGuard, kSentinel, b.bytes);
  buffers_.push_back(std::move(b));
  return static_cast<int>(buffers_.size()) - 1;
}

int RankCase::addInputBuffer(size_t elements, int inputRank, uint64_t first) {
  const int b = addBuffer(elements, false);
  fillInput(b, 0, elements, inputRank, first);
  return b;
}

void RankCase::fillInput(int buffer, size_t offset, size_t elements, int inputRank,
                         uint64_t first) {
  fillValues(c_.type, genOp_, c_.seed, inputRank, first, elements,
             buffers_[buffer].data() + offset * esz_);
}

void RankCase::expectInput(int buffer, size_t offset, size_t elements, int inputRank,
                           uint64_t first, std::string label) {
  // The region was just filled with value(inputRank, first + i): keep a copy to compare with.
  (void)inputRank;
  (void)first;
  Block snapshot(elements * esz_);
  std::memcpy(snapshot.get(), buffers_[buffer].data() + offset * esz_, elements * esz_);
  Region r{buffer, offset, elements, Kind::Input, std::move(label), nullptr, std::move(snapshot)};
  regions_.push_back(std::move(r));
}

void RankCase::expectRef(int buffer, size_t offset, size_t elements, std::function<Bytes()> ref,
                         std::string label) {
  Region r{buffer, offset, elements, Kind::Reference, std::move(label), std::move(ref), {}};
  regions_.push_back(std::move(r));
}

void RankCase::expectUntouched(int buffer, size_t offset, size_t elements, std::string label) {
  Region r{buffer, offset, elements, Kind::Untouched, std::move(label), nullptr, {}};
  regions_.push_back(std::move(r));
}

RefSpec RankCase::refSpec() const {
  return RefSpec{c_.type, genOp_, c_.seed, nranks_, c_.count, c_.root};
}

void RankCase::setupCollective() {
  const size_t n = c_.count;
  const size_t all = n * static_cast<size_t>(nranks_);
  const int r = rank_;
  const int root = c_.root;
  const bool isRoot = r == root;
  const RefSpec s = refSpec();
  auto at = [&](int b, size_t elems) { return buffers_[b].data() + elems * esz_; };
  switch (c_.coll) {
    case Coll::AllReduce: {
      if (c_.inPlace) {
        const int b = addInputBuffer(n, r, 0);
        send_ = recv_ = at(b, 0);
        expectRef(
            b, 0, n, [s] { return refAllReduce(s); }, "recvbuff (in place)");
      } else {
        const int sb = addInputBuffer(n, r, 0), rb = addBuffer(n);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, n, r, 0, "sendbuff (must not change)");
        expectRef(
            rb, 0, n, [s] { return refAllReduce(s); }, "recvbuff");
      }
      break;
    }
    case Coll::Broadcast: {
      if (c_.inPlace) {
        const int b = addBuffer(n);
        if (isRoot) fillInput(b, 0, n, r, 0);
        send_ = recv_ = at(b, 0);
        expectRef(
            b, 0, n, [s] { return refBroadcast(s); }, "buff (in place)");
      } else {
        // Non-roots' sendbuff is not read: fill it with this rank's values and check it stays.
        const int sb = addInputBuffer(n, r, 0), rb = addBuffer(n);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, n, r, 0, "sendbuff (must not change)");
        expectRef(
            rb, 0, n, [s] { return refBroadcast(s); }, "recvbuff");
      }
      break;
    }
    case Coll::Reduce: {
      if (c_.inPlace) {
        const int b = addInputBuffer(n, r, 0);
        send_ = recv_ = at(b, 0);
        if (isRoot) {
          expectRef(
              b, 0, n, [s] { return refReduce(s); }, "recvbuff (in place, root)");
        } else {
          expectInput(b, 0, n, r, 0, "sendbuff (in place, non-root: must not change)");
        }
      } else {
        const int sb = addInputBuffer(n, r, 0), rb = addBuffer(n);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, n, r, 0, "sendbuff (must not change)");
        if (isRoot) {
          expectRef(
              rb, 0, n, [s] { return refReduce(s); }, "recvbuff (root)");
        } else {
          expectUntouched(rb, 0, n, "recvbuff (non-root: must not be written)");
        }
      }
      break;
    }
    case Coll::AllGather: {
      if (c_.inPlace) {
        const int b = addBuffer(all);
        fillInput(b, r * n, n, r, 0);
        recv_ = at(b, 0);
        send_ = at(b, r * n);
        expectRef(
            b, 0, all, [s] { return refAllGather(s); }, "recvbuff (in place)");
      } else {
        const int sb = addInputBuffer(n, r, 0), rb = addBuffer(all);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, n, r, 0, "sendbuff (must not change)");
        expectRef(
            rb, 0, all, [s] { return refAllGather(s); }, "recvbuff");
      }
      break;
    }
    case Coll::ReduceScatter: {
      if (c_.inPlace) {
        const int b = addInputBuffer(all, r, 0);
        send_ = at(b, 0);
        recv_ = at(b, r * n);
        for (int j = 0; j < nranks_; ++j) {
          if (j == r) {
            expectRef(
                b, j * n, n, [s, r] { return refReduceScatter(s, r); },
                "recvbuff (in place, block " + std::to_string(j) + ")");
          } else {
            expectInput(b, j * n, n, r, j * n,
                        "sendbuff block " + std::to_string(j) + " (in place: must not change)");
          }
        }
      } else {
        const int sb = addInputBuffer(all, r, 0), rb = addBuffer(n);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, all, r, 0, "sendbuff (must not change)");
        expectRef(
            rb, 0, n, [s, r] { return refReduceScatter(s, r); }, "recvbuff");
      }
      break;
    }
    case Coll::AlltoAll: {
      if (c_.inPlace) {
        const int b = addInputBuffer(all, r, 0);
        send_ = recv_ = at(b, 0);
        expectRef(
            b, 0, all, [s, r] { return refAlltoAll(s, r); }, "recvbuff (in place)");
      } else {
        const int sb = addInputBuffer(all, r, 0), rb = addBuffer(all);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, all, r, 0, "sendbuff (must not change)");
        expectRef(
            rb, 0, all, [s, r] { return refAlltoAll(s, r); }, "recvbuff");
      }
      break;
    }
    case Coll::Gather: {
      if (c_.inPlace && isRoot) {
        const int b = addBuffer(all);
        fillInput(b, r * n, n, r, 0);
        recv_ = at(b, 0);
        send_ = at(b, r * n);
        expectRef(
            b, 0, all, [s] { return refGather(s); }, "recvbuff (in place, root)");
      } else {
        const int sb = addInputBuffer(n, r, 0), rb = addBuffer(all);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        expectInput(sb, 0, n, r, 0, "sendbuff (must not change)");
        if (isRoot) {
          expectRef(
              rb, 0, all, [s] { return refGather(s); }, "recvbuff (root)");
        } else {
          expectUntouched(rb, 0, all, "recvbuff (non-root: must not be written)");
        }
      }
      break;
    }
    case Coll::Scatter: {
      if (c_.inPlace && isRoot) {
        const int b = addInputBuffer(all, r, 0);
        send_ = at(b, 0);
        recv_ = at(b, r * n);
        // Block `root` is the root's own share: the whole buffer keeps its contents.
        expectInput(b, 0, all, r, 0, "sendbuff (in place, root: must not change)");
      } else {
        const int sb = addBuffer(all), rb = addBuffer(n);
        if (isRoot) fillInput(sb, 0, all, r, 0);
        send_ = at(sb, 0);
        recv_ = at(rb, 0);
        if (isRoot) {
          expectInput(sb, 0, all, r, 0, "sendbuff (root: must not change)");
        } else {
          expectUntouched(sb, 0, all, "sendbuff (non-root: must not be written)");
        }
        expectRef(
            rb, 0, n, [s, r] { return refScatter(s, r); }, "recvbuff");
      }
      break;
    }
    case Coll::SendRecv:
      break;
  }
}

namespace {
// The count of the message from `sender` to `receiver` in the VarCounts pattern (some are 0).
size_t varCount(size_t base, int sender, int receiver) {
  const size_t k = static_cast<size_t>(sender * 3 + receiver * 5 + 1) % 4;
  if (k == 0) return 0;
  return base * k / 2 + static_cast<size_t>(sender + receiver) % 3;
}
}  // namespace

void RankCase::setupSendRecv() {
  const int n = nranks_, r = rank_;
  const size_t c = c_.count;
  auto addSend = [&](int peer, int index, size_t count) {
    const int b = addInputBuffer(count, r, p2pIndex(peer, index));
    messages_.push_back({true, peer, index, count, b});
    expectInput(b, 0, count, r, p2pIndex(peer, index),
                "send buffer to peer " + std::to_string(peer) + " (must not change)");
  };
  auto addRecv = [&](int peer, int index, size_t count) {
    const int b = addBuffer(count);
    messages_.push_back({false, peer, index, count, b});
    RefSpec s = refSpec();
    s.count = count;
    expectRef(
        b, 0, count, [s, peer, r, index] { return refRecv(s, peer, r, index); },
        "recv buffer from peer " + std::to_string(peer) + " message " + std::to_string(index));
  };
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  switch (c_.pattern) {
    case Pattern::Ring:
      addSend(next, 0, c);
      addRecv(prev, 0, c);
      break;
    case Pattern::AllPairs:
      // Send to everyone first, then receive from everyone (opposite order).
      for (int k = 1; k <= n; ++k) addSend((r + k) % n, 0, c);
      for (int k = 1; k <= n; ++k) addRecv((r + n - k) % n, 0, c);
      break;
    case Pattern::Self:
      addSend(r, 0, c);
      addRecv(r, 0, c);
      break;
    case Pattern::VarCounts:
      for (int p = 0; p < n; ++p) addSend(p, 0, varCount(c, r, p));
      for (int p = n - 1; p >= 0; --p) addRecv(p, 0, varCount(c, p, r));
      break;
    case Pattern::TwoMessages:
      addSend(next, 0, c);
      addSend(next, 1, c / 2 + 1);
      addRecv(prev, 0, c);
      addRecv(prev, 1, c / 2 + 1);
      break;
  }
}

chorusResult_t RankCase::issue(chorusComm_t comm, chorusStream_t stream) {
  const size_t n = c_.count;
  const chorusDataType_t t = c_.type;
  switch (c_.coll) {
    case Coll::AllReduce:
      return chorusAllReduce(send_, recv_, n, t, c_.op, comm, stream);
    case Coll::Broadcast:
      return chorusBroadcast(send_, recv_, n, t, c_.root, comm, stream);
    case Coll::Reduce:
      return chorusReduce(send_, recv_, n, t, c_.op, c_.root, comm, stream);
    case Coll::AllGather:
      return chorusAllGather(send_, recv_, n, t, comm, stream);
    case Coll::ReduceScatter:
      return chorusReduceScatter(send_, recv_, n, t, c_.op, comm, stream);
    case Coll::AlltoAll:
      return chorusAlltoAll(send_, recv_, n, t, comm, stream);
    case Coll::Gather:
      return chorusGather(send_, recv_, n, t, c_.root, comm, stream);
    case Coll::Scatter:
      return chorusScatter(send_, recv_, n, t, c_.root, comm, stream);
    case Coll::SendRecv: {
      chorusResult_t first = chorusGroupStart();
      if (first != chorusSuccess) return first;
      for (auto& m : messages_) {
        chorusResult_t res =
            m.send ? chorusSend(buffers_[m.buffer].data(), m.count, t, m.peer, comm, stream)
                   : chorusRecv(buffers_[m.buffer].data(), m.count, t, m.peer, comm, stream);
        if (res != chorusSuccess && first == chorusSuccess) first = res;
      }
      const chorusResult_t end = chorusGroupEnd();
      return first != chorusSuccess ? first : end;
    }
  }
  return chorusInternalError;
}

std::string RankCase::prefix() const {
  return "[rank " + std::to_string(rank_) + "] " + c_.describe(nranks_);
}

size_t RankCase::bytes() const {
  size_t b = 0;
  for (const auto& buf : buffers_) b += buf.bytes;
  return b;
}

std::vector<std::string> RankCase::verify() const {
  std::vector<std::string> problems;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = buffers_[i];
    CheckResult front = checkPattern(b.mem.get(), kGuard, kGuardByte);
    CheckResult back = checkPattern(b.data() + b.bytes, kGuard, kGuardByte);
    if (!front.ok()) {
      problems.push_back(prefix() + ": written before the start of buffer " + std::to_string(i) +
                         ": " + front.first);
    }
    if (!back.ok()) {
      problems.push_back(prefix() + ": written past the end of buffer " + std::to_string(i) + ": " +
                         back.first);
    }
  }
  const uint64_t tolerance = (genOp_ == chorusAvg && isFloatType(c_.type)) ? 1 : 0;
  for (const Region& reg : regions_) {
    const unsigned char* got = buffers_[reg.buffer].data() + reg.offset * esz_;
    CheckResult res;
    switch (reg.kind) {
      case Kind::Untouched:
        res = checkPattern(got, reg.elements * esz_, kSentinel);
        break;
      case Kind::Input:
        res = compareElements(c_.type, got, reg.snapshot.get(), reg.elements, 0);
        break;
      case Kind::Reference: {
        const Bytes expected = reg.reference();
        res = compareElements(c_.type, got, expected.data(), reg.elements, tolerance);
        break;
      }
    }
    if (!res.ok()) problems.push_back(prefix() + ": " + reg.label + ": " + res.first);
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Drivers

void MatrixResult::fail(const std::string& message, size_t maxMessages) {
  ++failures;
  if (messages.size() < maxMessages) messages.push_back(message);
}

void MatrixResult::merge(const MatrixResult& other, size_t maxMessages) {
  cases += other.cases;
  failures += other.failures;
  seconds = std::max(seconds, other.seconds);
  for (const auto& m : other.messages) {
    if (messages.size() < maxMessages) messages.push_back(m);
  }
}

std::string MatrixResult::summary() const {
  std::string s = std::to_string(cases) + " cases, " + std::to_string(failures) + " failures";
  for (const auto& m : messages) s += "\n  " + m;
  if (failures > messages.size()) s += "\n  ...";
  return s;
}

namespace {

std::string callFailure(const RankCase& rc, const char* what, chorusResult_t res,
                        chorusComm_t comm) {
  return rc.prefix() + ": " + what + " returned " + resultName(res) + ": " +
         chorusGetLastError(comm);
}

void verifyInto(const RankCase& rc, MatrixResult& result, size_t maxMessages) {
  const auto problems = rc.verify();
  if (problems.empty()) return;
  result.fail(problems.front(), maxMessages);
  for (size_t i = 1; i < problems.size() && result.messages.size() < maxMessages; ++i) {
    result.messages.push_back(problems[i]);
  }
}

}  // namespace

MatrixResult runMatrix(chorusComm_t comm, int rank, int nranks, const MatrixOptions& opt,
                       chorusStream_t stream) {
  MatrixResult result;
  const double start = nowSeconds();
  const std::vector<Case> cases = enumerateCases(opt, nranks);
  result.cases = cases.size();
  if (stream == nullptr) {
    for (const Case& c : cases) {
      RankCase rc(c, rank, nranks);
      setProgress(rank, rc.prefix());
      const chorusResult_t res = rc.issue(comm, nullptr);
      if (res != chorusSuccess) {
        result.fail(callFailure(rc, "call", res, comm), opt.maxMessages);
        continue;
      }
      verifyInto(rc, result, opt.maxMessages);
    }
  } else {
    // Batches of cases of the same collective and type: enqueue all, then wait once.
    size_t i = 0;
    while (i < cases.size()) {
      std::vector<RankCase> batch;
      std::vector<bool> issued;
      size_t bytes = 0;
      while (i < cases.size() && batch.size() < std::max<size_t>(opt.streamBatch, 1)) {
        if (!batch.empty() && (cases[i].coll != batch.front().spec().coll ||
                               cases[i].type != batch.front().spec().type)) {
          break;
        }
        RankCase rc(cases[i], rank, nranks);
        if (!batch.empty() && bytes + rc.bytes() > opt.streamBatchBytes) break;
        bytes += rc.bytes();
        setProgress(rank, "enqueue " + rc.prefix());
        const chorusResult_t res = rc.issue(comm, stream);
        issued.push_back(res == chorusSuccess);
        if (res != chorusSuccess)
          result.fail(callFailure(rc, "enqueue", res, comm), opt.maxMessages);
        batch.push_back(std::move(rc));
        ++i;
      }
      const std::string last = batch.back().prefix();
      const chorusResult_t q = chorusStreamQuery(stream);
      if (q != chorusSuccess && q != chorusInProgress) {
        result.fail("[rank " + std::to_string(rank) + "] chorusStreamQuery returned " +
                        resultName(q) + " after enqueueing up to " + last,
                    opt.maxMessages);
      }
      setProgress(rank, "synchronize after " + last);
      const chorusResult_t sync = chorusStreamSynchronize(stream);
      if (sync != chorusSuccess) {
        result.fail("[rank " + std::to_string(rank) + "] chorusStreamSynchronize returned " +
                        resultName(sync) + " after " + last + ": " + chorusGetLastError(comm),
                    opt.maxMessages);
        continue;
      }
      const chorusResult_t q2 = chorusStreamQuery(stream);
      if (q2 != chorusSuccess) {
        result.fail("[rank " + std::to_string(rank) + "] chorusStreamQuery returned " +
                        resultName(q2) + " after chorusStreamSynchronize (" + last + ")",
                    opt.maxMessages);
      }
      for (size_t k = 0; k < batch.size(); ++k) {
        if (issued[k]) verifyInto(batch[k], result, opt.maxMessages);
      }
    }
  }
  result.seconds = nowSeconds() - start;
  return result;
}

MatrixResult runMatrixGrouped(const std::vector<chorusComm_t>& comms, const MatrixOptions& opt,
                              const std::vector<chorusStream_t>& streams) {
  MatrixResult result;
  const double start = nowSeconds();
  const int nranks = static_cast<int>(comms.size());
  const std::vector<Case> cases = enumerateCases(opt, nranks);
  result.cases = cases.size();
  for (const Case& c : cases) {
    std::vector<RankCase> ranks;
    ranks.reserve(nranks);
    for (int r = 0; r < nranks; ++r) ranks.emplace_back(c, r, nranks);
    setProgress(0, "grouped " + c.describe(nranks));
    chorusResult_t res = chorusGroupStart();
    bool ok = res == chorusSuccess;
    if (!ok)
      result.fail("chorusGroupStart returned " + std::string(resultName(res)), opt.maxMessages);
    for (int r = 0; r < nranks && ok; ++r) {
      res = ranks[r].issue(comms[r], streams.empty() ? nullptr : streams[r]);
      if (res != chorusSuccess) {
        result.fail(callFailure(ranks[r], "call in group", res, comms[r]), opt.maxMessages);
        ok = false;
      }
    }
    res = chorusGroupEnd();
    if (res != chorusSuccess) {
      result.fail(c.describe(nranks) + ": chorusGroupEnd returned " + resultName(res) + ": " +
                      chorusGetLastError(nullptr),
                  opt.maxMessages);
      ok = false;
    }
    if (!ok) continue;
    for (int r = 0; r < nranks && !streams.empty(); ++r) {
      res = chorusStreamSynchronize(streams[r]);
      if (res != chorusSuccess) {
        result.fail(ranks[r].prefix() + ": chorusStreamSynchronize returned " + resultName(res),
                    opt.maxMessages);
        ok = false;
      }
    }
    if (!ok) continue;
    for (int r = 0; r < nranks; ++r) verifyInto(ranks[r], result, opt.maxMessages);
  }
  result.seconds = nowSeconds() - start;
  return result;
}

}  // namespace ctest
