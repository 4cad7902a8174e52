#include "cuda/staging.h"

#include <algorithm>

namespace chorus {

void opBufferElems(const OpDesc& op, int rank, int nranks, size_t* sendElems, size_t* recvElems) {
  const size_t c = op.count;
  const size_t all = c * size_t(nranks);
  const bool root = rank == op.root;
  size_t s = 0, r = 0;
  switch (op.kind) {
    case OpKind::kAllReduce:
      s = c, r = c;
      break;
    case OpKind::kBroadcast:
      s = root ? c : 0, r = c;
      break;
    case OpKind::kReduce:
      s = c, r = root ? c : 0;
      break;
    case OpKind::kAllGather:
      s = c, r = all;
      break;
    case OpKind::kReduceScatter:
      s = all, r = c;
      break;
    case OpKind::kAlltoAll:
      s = all, r = all;
      break;
    case OpKind::kGather:
      s = c, r = root ? all : 0;
      break;
    case OpKind::kScatter:
      s = root ? all : 0, r = c;
      break;
    case OpKind::kSend:
      s = c;
      break;
    case OpKind::kRecv:
      r = c;
      break;
  }
  *sendElems = s;
  *recvElems = r;
}

namespace {
size_t alignUp(size_t v) {
  return (v + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}
}  // namespace

StagingPlan planStaging(const std::vector<const OpDesc*>& ops, int rank, int nranks) {
  StagingPlan plan;
  for (const OpDesc* op : ops) {
    size_t se = 0, re = 0;
    opBufferElems(*op, rank, nranks, &se, &re);
    const size_t esz = chorusTypeSize(op->type);
    StagedOp st;
    st.sendBytes = op->sendbuff != nullptr ? se * esz : 0;
    st.recvBytes = op->recvbuff != nullptr ? re * esz : 0;
    const bool useSend = op->sendbuff != nullptr && se > 0;
    const bool useRecv = op->recvbuff != nullptr && re > 0;
    const auto s0 = reinterpret_cast<uintptr_t>(op->sendbuff);
    const auto r0 = reinterpret_cast<uintptr_t>(op->recvbuff);
    const uintptr_t s1 = s0 + st.sendBytes, r1 = r0 + st.recvBytes;
    if (useSend && useRecv && s0 < r1 && r0 < s1) {
      // Overlapping buffers (in place): one region spanning both, same relative offsets.
      const uintptr_t lo = std::min(s0, r0), hi = std::max(s1, r1);
      st.sendOffset = plan.totalBytes + (s0 - lo);
      st.recvOffset = plan.totalBytes + (r0 - lo);
      plan.totalBytes += alignUp(size_t(hi - lo));
    } else {
      if (useSend) {
        st.sendOffset = plan.totalBytes;
        plan.totalBytes += alignUp(st.sendBytes);
      }
      if (useRecv) {
        st.recvOffset = plan.totalBytes;
        plan.totalBytes += alignUp(st.recvBytes);
      }
    }
    if (!useSend) st.sendBytes = 0;
    if (!useRecv) st.recvBytes = 0;
    plan.ops.push_back(st);
  }
  return plan;
}

OpDesc stagedView(const OpDesc& op, const StagedOp& s, unsigned char* base) {
  OpDesc v = op;
  v.sendbuff = s.sendOffset == StagedOp::kUnused ? nullptr : base + s.sendOffset;
  v.recvbuff = s.recvOffset == StagedOp::kUnused ? nullptr : base + s.recvOffset;
  return v;
}

}  // namespace chorus
