// The correctness matrix: collective x type x op x count x placement x root (x Send/Recv
// pattern), one rank's buffers and checks per case, and drivers that run the matrix on one
// communicator (one thread or process per rank) or on all communicators of a process from one
// thread inside chorusGroupStart/End.
#pragma once

#include <chorus/chorus.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"

namespace ctest {

enum class Coll {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  SendRecv
};
inline constexpr Coll kAllColls[] = {Coll::AllReduce, Coll::Broadcast,     Coll::Reduce,
                                     Coll::AllGather, Coll::ReduceScatter, Coll::AlltoAll,
                                     Coll::Gather,    Coll::Scatter,       Coll::SendRecv};
const char* collName(Coll c);
bool parseColl(const std::string& name, Coll* out);  // case-insensitive collName
bool collReduces(Coll c);
bool collHasRoot(Coll c);

// Send/Recv patterns, each issued by every rank inside chorusGroupStart/End:
//  Ring: send count to rank+1, receive count from rank-1;
//  AllPairs: send count to every rank (itself included), then receive from every rank;
//  Self: send to and receive from itself;
//  VarCounts: all pairs, a different count (some 0) for every (sender, receiver) pair;
//  TwoMessages: two messages (count, count/2+1) to rank+1, received in order from rank-1.
enum class Pattern { Ring, AllPairs, Self, VarCounts, TwoMessages };
inline constexpr Pattern kAllPatterns[] = {Pattern::Ring, Pattern::AllPairs, Pattern::Self,
                                           Pattern::VarCounts, Pattern::TwoMessages};
const char* patternName(Pattern p);

inline constexpr size_t kBigCount = 1048579;
// Counts at or above this are "big": only a subset of type x op x placement x root runs.
inline constexpr size_t kBigThreshold = 100000;

struct Case {
  Coll coll = Coll::AllReduce;
  chorusDataType_t type = chorusInt32;
  chorusRedOp_t op = chorusSum;  // kNoOp for collectives that do not reduce
  size_t count = 0;
  bool inPlace = false;
  int root = 0;
  Pattern pattern = Pattern::Ring;
  uint64_t seed = 0;
  std::string describe(int nranks) const;
};

// How much of the type x op x placement x root matrix runs at big counts.
//  Full: everything.
//  Subset: reducing collectives run every type with sum, float32 and int32 with every op, and
//    one (type, op) pair that rotates with the rank count and the collective; data movement
//    (which moves bytes) runs one type of each element size 1, 2, 4, 8, rotating with the rank
//    count and the collective; Send/Recv likewise, each with a rotating pattern. Each
//    combination gets one placement (alternating in-place / out-of-place) and one root
//    (rotating).
//  Minimal: two rotating combinations per collective (one of them sum / a plain copy).
//  None: big counts are skipped.
enum class BigPolicy { None, Minimal, Subset, Full };
const char* bigPolicyName(BigPolicy p);
bool parseBigPolicy(const std::string& name, BigPolicy* out);

struct MatrixOptions {
  std::vector<Coll> colls{std::begin(kAllColls), std::end(kAllColls)};
  std::vector<chorusDataType_t> types;  // empty: all
  std::vector<chorusRedOp_t> ops;       // empty: all
  std::vector<Pattern> patterns;        // empty: all
  std::vector<size_t> counts{0, 1, 7, 1000, kBigCount};
  BigPolicy big = BigPolicy::Subset;
  uint64_t seed = 20240601;
  size_t maxMessages = 20;  // failure messages kept (the count is always complete)
  size_t streamBatch = 48;  // cases enqueued on a created stream before one synchronize
  size_t streamBatchBytes = size_t{64} << 20;
};

// {0, nranks-1, nranks/2}, deduplicated.
std::vector<int> rootsFor(int nranks);
// The cases, in the same order on every rank (a function of the options and nranks only).
std::vector<Case> enumerateCases(const MatrixOptions& opt, int nranks);

// Host memory for test buffers, from a small per-thread pool: big buffers are reused from case
// to case instead of being mapped and faulted in again. Contents are not initialised.
class Block {
 public:
  Block() = default;
  explicit Block(size_t bytes);
  Block(Block&& other) noexcept { *this = std::move(other); }
  Block& operator=(Block&& other) noexcept;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() { release(); }
  unsigned char* get() const { return p_; }
  size_t size() const { return size_; }

 private:
  void release();
  unsigned char* p_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

// One rank's part of one case: its buffers (with guard bytes), the library calls, the checks.
class RankCase {
 public:
  RankCase(const Case& c, int rank, int nranks);
  RankCase(const RankCase&) = delete;
  RankCase& operator=(const RankCase&) = delete;
  RankCase(RankCase&&) = default;
  // Issues the call(s) of this case (Send/Recv inside its own group).
  chorusResult_t issue(chorusComm_t comm, chorusStream_t stream);
  // Problems found (empty when the case passed), each prefixed with the case and rank.
  std::vector<std::string> verify() const;
  std::string prefix() const;
  size_t bytes() const;
  const Case& spec() const { return c_; }

 private:
  struct Buffer {
    Block mem;  // guard | data | guard
    size_t bytes = 0;
    unsigned char* data() { return mem.get() + kGuard; }
    const unsigned char* data() const { return mem.get() + kGuard; }
  };
  enum class Kind { Reference, Input, Untouched };
  struct Region {
    int buffer;
    size_t offset;  // in elements
    size_t elements;
    Kind kind;
    std::string label;
    std::function<Bytes()> reference;  // Kind::Reference
    Block snapshot;  // Kind::Input: the contents right after filling (value(rank, first + i))
  };
  struct Message {
    bool send;
    int peer;
    int index;
    size_t count;
    int buffer;
  };
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xa5;
  static constexpr unsigned char kSentinel = 0xcd;

  // A buffer with guard bytes around it, its contents kSentinel (or left for the caller).
  int addBuffer(size_t elements, bool sentinel = true);
  // A buffer holding value(inputRank, first + i).
  int addInputBuffer(size_t elements, int inputRank, uint64_t first);
  void fillInput(int buffer, size_t offset, size_t elements, int inputRank, uint64_t first);
  void expectInput(int buffer, size_t offset, size_t elements, int inputRank, uint64_t first,
                   std::string label);
  void expectRef(int buffer, size_t offset, size_t elements, std::function<Bytes()> ref,
                 std::string label);
  void expectUntouched(int buffer, size_t offset, size_t elements, std::string label);
  RefSpec refSpec() const;
  void setupCollective();
  void setupSendRecv();

  Case c_;
  int rank_, nranks_;
  size_t esz_;
  chorusRedOp_t genOp_;
  std::vector<Buffer> buffers_;
  std::vector<Region> regions_;
  std::vector<Message> messages_;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
};

struct MatrixResult {
  size_t cases = 0;
  size_t failures = 0;
  std::vector<std::string> messages;
  double seconds = 0;
  void fail(const std::string& message, size_t maxMessages);
  void merge(const MatrixResult& other, size_t maxMessages);
  std::string summary() const;  // "N cases, F failures" and the kept messages, one a line
};

// Every case, on one communicator of rank `rank` (every rank runs this concurrently). A null
// stream: each call completes before it returns; a created stream: batches of cases are
// enqueued, then chorusStreamQuery / chorusStreamSynchronize, then checked.
MatrixResult runMatrix(chorusComm_t comm, int rank, int nranks, const MatrixOptions& opt,
                       chorusStream_t stream = nullptr);
// Every case on all ranks of this process from one thread: chorusGroupStart; the call on every
// comms[r]; chorusGroupEnd. streams: empty (null streams) or one per communicator.
MatrixResult runMatrixGrouped(const std::vector<chorusComm_t>& comms, const MatrixOptions& opt,
                              const std::vector<chorusStream_t>& streams = {});

}  // namespace ctest
