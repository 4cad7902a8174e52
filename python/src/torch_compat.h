// The one place where the torch backend differs by torch version. Every other file of the
// backend is written once against these names.
//
// - torch >= 2.0: a third-party backend is a c10d::Backend (ProcessGroup wraps one per device
//   type); endCoalescing() returns one Work; the *_tensor_coalesced ops, getBackendOptions,
//   setTimeout, split and shrink exist (split and shrink in the releases that have them).
// - torch 1.13 (Debian 12's python3-torch): the backend is a c10d::ProcessGroup;
//   endCoalescing(std::vector<Work>&); PREMUL_SUM's tensor factor is a list.
#pragma once

#include <torch/version.h>  // TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR

#include <cstdint>
#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define CHORUS_TORCH_BACKEND_API 1
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define CHORUS_TORCH_BACKEND_API 0
#endif

// Methods that override in some 2.x releases and are plain members in others are declared
// without `override` between these two lines (clang would otherwise ask for it where they do).
#if defined(__clang__)
#define CHORUS_TORCH_MAYBE_OVERRIDE_BEGIN \
  _Pragma("clang diagnostic push")        \
      _Pragma("clang diagnostic ignored \"-Winconsistent-missing-override\"")
#define CHORUS_TORCH_MAYBE_OVERRIDE_END _Pragma("clang diagnostic pop")
#else
#define CHORUS_TORCH_MAYBE_OVERRIDE_BEGIN
#define CHORUS_TORCH_MAYBE_OVERRIDE_END
#endif

namespace chorus_torch {

#if CHORUS_TORCH_BACKEND_API
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// The torch version this module was compiled against, "MAJOR.MINOR".
inline constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
inline constexpr int kTorchMinor = TORCH_VERSION_MINOR;

// PREMUL_SUM's factor: a double, or a one-element tensor (torch 1.13 keeps a list of them).
struct PreMulFactor {
  std::optional<double> scalar;
  std::optional<at::Tensor> tensor;
};

inline std::optional<PreMulFactor> preMulFactor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM || !op.supplement_) return std::nullopt;
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (s == nullptr) return std::nullopt;
  PreMulFactor f;
#if CHORUS_TORCH_BACKEND_API
  if (s->tensor_factor.defined())
    f.tensor = s->tensor_factor;
  else
    f.scalar = s->double_factor;
#else
  if (!s->tensor_factors.empty())
    f.tensor = s->tensor_factors[0];
  else
    f.scalar = s->double_factor;
#endif
  return f;
}

}  // namespace chorus_torch
