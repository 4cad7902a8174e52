// chorus._chorus_torch_ext (loaded by chorus/_chorus_torch.py once the torch release matches): the
// factory torch.distributed calls for backend "chorus", and a few introspection helpers. Registered
// by python/chorus/torch.py.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

namespace py = pybind11;

namespace {

chorus_torch::ProcessGroupChorus* chorusGroup(
    const c10::intrusive_ptr<chorus_torch::BackendBase>& pg) {
  auto* p = dynamic_cast<chorus_torch::ProcessGroupChorus*>(pg.get());
  TORCH_CHECK(p != nullptr, "not a chorus process group (backend ",
              pg ? pg->getBackendName() : std::string("None"), ")");
  return p;
}

}  // namespace

PYBIND11_MODULE(_chorus_torch_ext, m) {
  m.doc() = "Chorus process group for torch.distributed (use chorus.torch)";
  // The torch release this module was compiled against; chorus.torch compares it with the
  // running torch before it loads anything else of this module.
  m.attr("TORCH_VERSION") =
      std::to_string(chorus_torch::kTorchMajor) + "." + std::to_string(chorus_torch::kTorchMinor);
  m.attr("BACKEND_API") = bool(CHORUS_TORCH_BACKEND_API);
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout,
         const std::vector<int>& globalRanks) -> c10::intrusive_ptr<chorus_torch::BackendBase> {
        auto pg = c10::make_intrusive<chorus_torch::ProcessGroupChorus>(store, rank, size, timeout);
        pg->setGlobalRanks(globalRanks);
        return pg;
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("global_ranks") = std::vector<int>{}, py::call_guard<py::gil_scoped_release>());
  m.def("is_async", [](const c10::intrusive_ptr<chorus_torch::BackendBase>& pg) {
    return chorusGroup(pg)->async();
  });
  m.def("abort", [](const c10::intrusive_ptr<chorus_torch::BackendBase>& pg) {
    chorusGroup(pg)->abortComm();
  });
  // Registered memory (chorus.torch.registered_empty; python/src/registered_pool.h).
  m.def(
      "registered_empty",
      [](const c10::intrusive_ptr<chorus_torch::BackendBase>& pg, int64_t bytes) {
        TORCH_CHECK(bytes >= 0, "registered_empty: negative size");
        return chorusGroup(pg)->registeredEmpty(size_t(bytes));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("registered_stats", [](const c10::intrusive_ptr<chorus_torch::BackendBase>& pg) {
    const chorus_torch::RegisteredPoolStats s = chorusGroup(pg)->registeredStats();
    py::dict d;
    d["blocks"] = s.blocks;
    d["free_blocks"] = s.freeBlocks;
    d["bytes"] = s.bytes;
    d["reuses"] = s.reuses;
    d["open"] = s.open;
    return d;
  });
  m.def("registered_live_blocks", &chorus_torch::RegisteredPool::liveBlocks);
  m.def("sequence_number", [](const c10::intrusive_ptr<chorus_torch::BackendBase>& pg) {
    return chorusGroup(pg)->getSequenceNumberForGroup();
  });
}
