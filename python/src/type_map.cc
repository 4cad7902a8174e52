// torch dtypes and ReduceOps as Chorus data types and reductions (type_map.h).
#include "type_map.h"

#include <string>

#include "errors.h"

namespace chorus_torch {

chorusDataType_t reduceType(int rank, const char* op, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return chorusFloat32;
    case at::kDouble:
      return chorusFloat64;
    case at::kHalf:
      return chorusFloat16;
    case at::kBFloat16:
      return chorusBfloat16;
    case at::kChar:
      return chorusInt8;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1: SUM is MAX, PRODUCT is MIN (as NCCL maps them)
      return chorusUint8;
    case at::kInt:
      return chorusInt32;
    case at::kLong:
      return chorusInt64;
    default:
      refuse(rank, op,
             std::string("no reduction for dtype ") + c10::toString(t.scalar_type()) +
                 " (float32, float64, float16, bfloat16, int8, uint8, bool, int32, int64)");
  }
}

bool isBitwise(const c10d::ReduceOp& r) {
  return r.op_ == c10d::ReduceOp::BAND || r.op_ == c10d::ReduceOp::BOR ||
         r.op_ == c10d::ReduceOp::BXOR;
}

// The Chorus reduction for a torch ReduceOp on tensors of `t`'s dtype. PREMUL_SUM is a SUM of
// inputs the caller has multiplied first (premultiply); BAND/BOR/BXOR take bitwiseAllreduce.
chorusRedOp_t redOp(int rank, const char* op, const c10d::ReduceOp& r, const at::Tensor& t) {
  const bool isBool = t.scalar_type() == at::kBool;
  switch (r.op_) {
    case c10d::ReduceOp::SUM:
      return isBool ? chorusMax : chorusSum;
    case c10d::ReduceOp::PRODUCT:
      return isBool ? chorusMin : chorusProd;
    case c10d::ReduceOp::MIN:
      return chorusMin;
    case c10d::ReduceOp::MAX:
      return chorusMax;
    case c10d::ReduceOp::AVG:
      if (isBool) refuse(rank, op, "AVG of bool tensors is undefined (use SUM, MIN or MAX)");
      return chorusAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      if (!at::isFloatingType(t.scalar_type()))
        refuse(rank, op, "PREMUL_SUM needs a floating-point tensor");
      if (!preMulFactor(r))
        refuse(rank, op, "PREMUL_SUM without its factor (make it with _make_nccl_premul_sum)");
      return chorusSum;
    default:
      refuse(rank, op, "unsupported ReduceOp");
  }
}

// PREMUL_SUM: `t` times the op's factor, in place.
void premultiply(const c10d::ReduceOp& r, at::Tensor& t) {
  if (r.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  const auto f = preMulFactor(r);
  if (f->tensor)
    t.mul_(f->tensor->to(t.scalar_type()));
  else
    t.mul_(*f->scalar);
}

}  // namespace chorus_torch
