// The algorithm table's rows, in order: one line per algorithm, `X(enumerator, descriptor)`.
// This list is the one place an algorithm is named outside its own file: comm/plan.h makes the
// Algo enumerators from it (a row's index is its value) and algo/table.cc declares the
// descriptors and builds the table from it. A new algorithm is its file in algo/ (which defines
// the descriptor, comm/plan.h AlgoDesc) plus one line here; the descriptor says what it runs,
// costs, calibrates and keeps (CONTRIBUTING.md "Adding an algorithm").
#pragma once

// clang-format off
#define CHORUS_ALGO_ROWS(X)                                                                        \
  X(kRing, kRingAlgo)                         /* algo/ring.cc */                                   \
  X(kTree, kTreeAlgo)                         /* algo/tree.cc */                                   \
  X(kChain, kChainAlgo)                       /* algo/chain.cc */                                  \
  X(kDirect, kDirectAlgo)                     /* algo/p2p_collectives.cc */                        \
  X(kNaive, kNaiveAlgo)                       /* algo/naive.cc */                                  \
  X(kHier, kHierAlgo)                         /* algo/hier.cc */                                   \
  X(kOneShot, kOneShotAlgo)                   /* algo/oneshot.cc */                                \
  X(kCma, kCmaAlgo)                           /* algo/copy.cc: single copy from the peers */       \
  X(kTwoShot, kTwoShotAlgo)                   /* algo/oneshot.cc: AllReduce, two hand-offs */      \
  X(kHalvingDoubling, kHalvingDoublingAlgo)   /* algo/halving_doubling.cc: AllReduce */            \
  X(kZeroCopy, kZeroCopyAlgo)                 /* algo/zerocopy.cc: registered buffers */           \
  X(kRecursiveDoubling, kRecursiveDoublingAlgo) /* algo/halving_doubling.cc: small AllReduce */
// clang-format on
