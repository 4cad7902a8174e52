// torch dtypes and ReduceOps as Chorus data types and reductions (each refuses, with a
// c10::Error naming the operation and rank, what Chorus cannot do).
#pragma once

#include <ATen/ATen.h>

#include "chorus/chorus.h"
#include "torch_compat.h"

namespace chorus_torch {

// The Chorus data type a reduction runs on for tensors of `t`'s dtype (bool as uint8).
chorusDataType_t reduceType(int rank, const char* op, const at::Tensor& t);

// BAND, BOR or BXOR: no Chorus kernel (ProcessGroupChorus::bitwise folds them itself).
bool isBitwise(const c10d::ReduceOp& r);

// The Chorus reduction for a torch ReduceOp on tensors of `t`'s dtype. PREMUL_SUM is a SUM of
// inputs the caller has multiplied first (premultiply); BAND/BOR/BXOR take bitwiseAllreduce.
chorusRedOp_t redOp(int rank, const char* op, const c10d::ReduceOp& r, const at::Tensor& t);

// PREMUL_SUM: `t` times the op's factor, in place.
void premultiply(const c10d::ReduceOp& r, at::Tensor& t);

}  // namespace chorus_torch
