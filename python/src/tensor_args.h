// The tensors an operation takes: the checks every operation runs on its arguments (each refuses
// with a c10::Error naming the operation and rank), and their raw bytes for the Chorus calls.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <vector>

namespace chorus_torch {

// Every tensor must be a dense CPU tensor; one tensor per process (no multi-device lists).
void checkTensor(int rank, const char* op, const at::Tensor& t);

// Exactly one tensor, which passes checkTensor.
void checkSingle(int rank, const char* op, const std::vector<at::Tensor>& ts);

// A contiguous tensor to run on: t itself, or a copy that copyBack() writes into t after.
struct Dense {
  at::Tensor user, work;
  explicit Dense(const at::Tensor& t) : user(t), work(t.is_contiguous() ? t : t.contiguous()) {}
  void copyBack() {
    if (!work.is_same(user)) user.copy_(work);
  }
};

inline size_t nbytes(const at::Tensor& t) {
  return size_t(t.numel()) * t.element_size();
}

inline char* bytesOf(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

// All tensors of a list share dtype and element count with `like`.
void checkList(int rank, const char* op, const std::vector<at::Tensor>& ts, const at::Tensor& like,
               size_t expected);

// The tensor forms: `whole` (named wholeName) holds size x `block`, same dtype.
// all_gather_into_tensor: whole = output; reduce_scatter_tensor: whole = input.
void checkWholeOfBlocks(int rank, int size, const char* op, const at::Tensor& whole,
                        const char* wholeName, const at::Tensor& block);

void checkGatherShapes(int rank, int size, const char* op, const at::Tensor& output,
                       const at::Tensor& input);

void checkScatterShapes(int rank, int size, const char* op, const at::Tensor& output,
                        const at::Tensor& input);

}  // namespace chorus_torch
