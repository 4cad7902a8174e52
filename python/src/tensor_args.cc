// Argument checks of the torch backend's operations (tensor_args.h).
#include "tensor_args.h"

#include <string>

#include "errors.h"

namespace chorus_torch {

// Every tensor must be a dense CPU tensor; one tensor per process (no multi-device lists).
void checkTensor(int rank, const char* op, const at::Tensor& t) {
  if (!t.defined()) refuse(rank, op, "undefined tensor");
  if (!t.device().is_cpu())
    refuse(rank, op,
           "only CPU tensors (device " + t.device().str() +
               "); use the nccl backend "
               "for CUDA tensors");
  if (t.layout() != at::kStrided)
    refuse(rank, op, "sparse tensors are not supported (call .to_dense() first)");
}

void checkSingle(int rank, const char* op, const std::vector<at::Tensor>& ts) {
  if (ts.size() != 1)
    refuse(rank, op, "expects one tensor per process, got " + std::to_string(ts.size()));
  checkTensor(rank, op, ts[0]);
}

// All tensors of a list share dtype and element count with `like`.
void checkList(int rank, const char* op, const std::vector<at::Tensor>& ts, const at::Tensor& like,
               size_t expected) {
  if (ts.size() != expected)
    refuse(rank, op,
           "expects a list of " + std::to_string(expected) + " tensors, got " +
               std::to_string(ts.size()));
  for (const auto& t : ts) {
    checkTensor(rank, op, t);
    if (t.scalar_type() != like.scalar_type() || t.numel() != like.numel())
      refuse(rank, op, "every tensor of the list must have the input's dtype and element count");
  }
}

// The tensor forms: `whole` (named wholeName) holds size x `block`, same dtype.
// all_gather_into_tensor: whole = output; reduce_scatter_tensor: whole = input.
void checkWholeOfBlocks(int rank, int size, const char* op, const at::Tensor& whole,
                        const char* wholeName, const at::Tensor& block) {
  checkTensor(rank, op, whole);
  checkTensor(rank, op, block);
  if (whole.scalar_type() != block.scalar_type())
    refuse(rank, op, "output and input dtypes differ");
  if (whole.numel() != block.numel() * size)
    refuse(rank, op,
           std::string(wholeName) + " holds " + std::to_string(whole.numel()) +
               " elements, expected world size x " + std::to_string(block.numel()));
}

void checkGatherShapes(int rank, int size, const char* op, const at::Tensor& output,
                       const at::Tensor& input) {
  checkWholeOfBlocks(rank, size, op, output, "output", input);
}

void checkScatterShapes(int rank, int size, const char* op, const at::Tensor& output,
                        const at::Tensor& input) {
  checkWholeOfBlocks(rank, size, op, input, "input", output);
}

}  // namespace chorus_torch
