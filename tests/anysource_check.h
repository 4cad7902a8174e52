// The any-source receive check (chorusRecvAny) that one rank runs, shared by the threaded tests
// (tests/test_anysource.cc) and the multi-process worker (tests/anysource_worker.cc).
//
// Rank 0 receives, every other rank sends. Each round, every sender sends `perRound` messages of
// `count` int32 to rank 0, message j of sender s in round r holding value(s, r, j, k); rank 0
// issues (nranks-1) * perRound any-source receives (one at a time, or all in one group) and
// checks every message against that reference: the source it reported, the content, and that
// each sender's messages come in the order it sent them (j = 0, 1, ...). Every `collEvery`
// rounds all ranks run an AllReduce (checked too), so that senders running ahead put a
// collective's data into rank 0's FIFOs while it still receives from any source: that data must
// never be taken for a message.
#pragma once

#include <chorus/chorus.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace anysource {

struct Options {
  size_t count = 1000;  // int32 per message
  int rounds = 20;
  int perRound = 2;    // messages per sender per round
  int collEvery = 1;   // an AllReduce every this many rounds (0: none)
  bool group = false;  // rank 0 issues a round's receives in one chorusGroupStart/End
};

inline int32_t value(int sender, int round, int j, size_t k) {
  return int32_t(sender * 1000003 + round * 7919 + j * 131 + int(k % 1009));
}

// Runs rank `rank` of the check; "" when every message and AllReduce was right, else the first
// problem.
inline std::string run(chorusComm_t comm, int rank, int nranks, const Options& o) {
  char msg[512];
  auto err = [&](const char* what, chorusResult_t r) {
    std::snprintf(msg, sizeof msg, "rank %d: %s: %s: %s", rank, what, chorusGetErrorString(r),
                  chorusGetLastError(comm));
    return std::string(msg);
  };
  const int senders = nranks - 1;
  const int perRound = senders * o.perRound;
  std::vector<std::vector<int32_t>> bufs(size_t(perRound), std::vector<int32_t>(o.count));
  std::vector<int> source(size_t(perRound), -1);
  std::vector<int> nextJ(size_t(nranks), 0);  // per sender: the next message index expected
  std::vector<float> ar(64);
  for (int round = 0; round < o.rounds; ++round) {
    if (rank == 0) {
      for (auto& b : bufs) b.assign(o.count, -1);
      std::fill(source.begin(), source.end(), -1);
      if (o.group) chorusGroupStart();
      for (int i = 0; i < perRound; ++i) {
        chorusResult_t r = chorusRecvAny(bufs[size_t(i)].data(), o.count, chorusInt32,
                                         &source[size_t(i)], comm, nullptr);
        if (r != chorusSuccess) {
          if (o.group) chorusGroupEnd();
          return err("chorusRecvAny", r);
        }
      }
      if (o.group) {
        chorusResult_t r = chorusGroupEnd();
        if (r != chorusSuccess) return err("chorusGroupEnd", r);
      }
      std::fill(nextJ.begin(), nextJ.end(), 0);
      for (int i = 0; i < perRound; ++i) {
        const int s = source[size_t(i)];
        if (s < 1 || s >= nranks) {
          std::snprintf(msg, sizeof msg, "round %d receive %d: source %d is not a sender", round, i,
                        s);
          return msg;
        }
        const int j = nextJ[size_t(s)]++;
        for (size_t k = 0; k < o.count; ++k) {
          if (bufs[size_t(i)][k] != value(s, round, j, k)) {
            std::snprintf(msg, sizeof msg,
                          "round %d receive %d (source %d, its message %d): element %zu is %d, "
                          "want %d",
                          round, i, s, j, k, int(bufs[size_t(i)][k]), int(value(s, round, j, k)));
            return msg;
          }
        }
      }
      for (int s = 1; s < nranks; ++s)
        if (nextJ[size_t(s)] != o.perRound) {
          std::snprintf(msg, sizeof msg, "round %d: %d messages from rank %d, want %d", round,
                        nextJ[size_t(s)], s, o.perRound);
          return msg;
        }
    } else {
      std::vector<int32_t> b(o.count);
      for (int j = 0; j < o.perRound; ++j) {
        for (size_t k = 0; k < o.count; ++k) b[k] = value(rank, round, j, k);
        chorusResult_t r = chorusSend(b.data(), o.count, chorusInt32, 0, comm, nullptr);
        if (r != chorusSuccess) return err("chorusSend", r);
      }
    }
    if (o.collEvery > 0 && (round + 1) % o.collEvery == 0) {
      for (size_t k = 0; k < ar.size(); ++k) ar[k] = float(rank + 1 + int(k) + round);
      chorusResult_t r =
          chorusAllReduce(ar.data(), ar.data(), ar.size(), chorusFloat32, chorusSum, comm, nullptr);
      if (r != chorusSuccess) return err("chorusAllReduce", r);
      for (size_t k = 0; k < ar.size(); ++k) {
        const float want = float(nranks * (nranks + 1) / 2 + nranks * (int(k) + round));
        if (ar[k] != want) {
          std::snprintf(msg, sizeof msg, "round %d: AllReduce element %zu is %g, want %g", round, k,
                        double(ar[k]), double(want));
          return msg;
        }
      }
    }
  }
  return "";
}

}  // namespace anysource
