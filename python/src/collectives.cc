// ProcessGroupChorus's collective operations (process_group.h): each checks its arguments, maps
// the tensors to one Chorus call (or a few) and hands the job to the engine through collective();
// monitoredBarrier checks the ranks in through the store instead. Point-to-point operations:
// point_to_point.cc.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "errors.h"
#include "exchange.h"
#include "process_group.h"
#include "tensor_args.h"
#include "type_map.h"

namespace chorus_torch {

namespace {
// Sparse all_reduce's per-rank record: nnz, sparse dims, dense dims, dtype, the sizes.
constexpr int64_t kSparseMaxDims = 28;
constexpr size_t kSparseRecord = 4 + size_t(kSparseMaxDims);
}  // namespace

#if CHORUS_TORCH_BACKEND_API
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  static constexpr const char* op = "all_gather_into_tensor_coalesced";
  if (outputs.size() != inputs.size()) refuse(rank_, op, "as many outputs as inputs expected");
  std::vector<std::shared_ptr<Dense>> outs;
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkGatherShapes(rank_, size_, op, outputs[i], inputs[i]);
    ins.push_back(inputs[i].contiguous());
    outs.push_back(std::make_shared<Dense>(outputs[i]));
  }
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::COALESCED, outputs,
      [ins, outs, comm] {
        grouped(comm, op, ins.size(), [&](size_t i) {
          return chorusAllGather(ins[i].data_ptr(), outs[i]->work.data_ptr(), nbytes(ins[i]),
                                 chorusInt8, comm, nullptr);
        });
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* op = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size()) refuse(rank_, op, "as many outputs as inputs expected");
  if (isBitwise(opts.reduceOp)) refuse(rank_, op, "BAND, BOR and BXOR: use reduce_scatter_tensor");
  std::vector<std::shared_ptr<Dense>> outs;
  std::vector<at::Tensor> ins;
  std::vector<chorusDataType_t> types;
  chorusRedOp_t rop = chorusSum;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkScatterShapes(rank_, size_, op, outputs[i], inputs[i]);
    types.push_back(reduceType(rank_, op, outputs[i]));
    rop = redOp(rank_, op, opts.reduceOp, outputs[i]);
    at::Tensor in = inputs[i].contiguous();
    if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
      in = in.clone();
      premultiply(opts.reduceOp, in);
    }
    ins.push_back(in);
    outs.push_back(std::make_shared<Dense>(outputs[i]));
  }
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::COALESCED, outputs,
      [ins, outs, types, rop, comm] {
        grouped(comm, op, ins.size(), [&](size_t i) {
          return chorusReduceScatter(ins[i].data_ptr(), outs[i]->work.data_ptr(),
                                     size_t(outs[i]->work.numel()), types[i], rop, comm, nullptr);
        });
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}
#endif

// Rank 0 waits (opts.timeout, else the group's) for every other rank to check in through the
// store, then releases them; a rank that does not arrive is named on rank 0 and, through the
// store, on every rank that did.
void ProcessGroupChorus::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const std::string base = "chorus/monitored_barrier/" + std::to_string(++monitoredSeq_) + "/";
  engine_->flush();
  if (rank_ != 0) {
    store_->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
    // Rank 0 reports within its timeout of arriving: wait for that report twice as long (and 5 s
    // more) before naming rank 0 itself.
    const auto patience = timeout * 2 + std::chrono::milliseconds(5000);
    try {
      store_->wait({base + "result"}, patience);
    } catch (const std::exception&) {
      TORCH_CHECK(false, "Rank ", rank_, " successfully reached monitoredBarrier, but received ",
                  "errors while waiting for send/recv from rank 0: rank 0 gave no answer within ",
                  patience.count(), " ms (chorus monitored_barrier)");
    }
    const std::vector<uint8_t> v = store_->get(base + "result");
    const std::string result(v.begin(), v.end());
    TORCH_CHECK(result == "ok", "Rank ", rank_, " successfully reached monitoredBarrier, but ",
                "received errors while waiting for send/recv from rank 0. Please check rank 0 ",
                "logs for faulty rank: ", result, " (chorus monitored_barrier)");
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) missing.push_back(r);
  while (!missing.empty()) {
    std::vector<int> still;
    for (int r : missing)
      if (!store_->check({base + std::to_string(r)})) still.push_back(r);
    missing.swap(still);
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string result = "ok";
  if (!missing.empty()) {
    std::string names;
    const size_t shown = waitAllRanks ? missing.size() : 1;
    for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + std::to_string(missing[i]);
    // gloo's wording, which torch's tests and users' log scrapers look for.
    result = "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) +
             " ms: Rank" + std::string(shown > 1 ? "s " : " ") + names +
             " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
  }
  store_->set(base + "result", std::vector<uint8_t>(result.begin(), result.end()));
  TORCH_CHECK(result == "ok", result, " (chorus monitored_barrier)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  checkSingle(rank_, "broadcast", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "broadcast", "root " + std::to_string(opts.rootRank) + " out of range");
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const int root = int(opts.rootRank);
  return collective(
      c10d::OpType::BROADCAST, tensors,
      [d, comm, root] {
        check(chorusBroadcast(d->work.data_ptr(), d->work.data_ptr(), nbytes(d->work), chorusInt8,
                              root, comm, nullptr),
              comm, "broadcast");
        d->copyBack();
      },
      opts.timeout);
}

// BAND, BOR, BXOR (Chorus has no bitwise kernels): every rank's tensor is gathered and folded
// here, in rank order; `done` gets the result.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::bitwise(
    const char* op, c10d::OpType type, std::vector<at::Tensor> outputs, const at::Tensor& input,
    c10d::ReduceOp::RedOpType rop, std::chrono::milliseconds timeout,
    std::function<void(const at::Tensor&)> done) {
  if (at::isFloatingType(input.scalar_type()) || at::isComplexType(input.scalar_type()))
    refuse(rank_, op, "BAND, BOR and BXOR need an integer or bool tensor");
  at::Tensor in = input.contiguous();
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      type, std::move(outputs),
      [in, comm, n, rop, op, done] {
        at::Tensor all = at::empty({int64_t(n), in.numel()}, in.options());
        check(chorusAllGather(in.data_ptr(), all.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
              comm, op);
        at::Tensor acc = all[0].clone();
        for (int r = 1; r < n; ++r) {
          if (rop == c10d::ReduceOp::BAND)
            acc.bitwise_and_(all[r]);
          else if (rop == c10d::ReduceOp::BOR)
            acc.bitwise_or_(all[r]);
          else
            acc.bitwise_xor_(all[r]);
        }
        done(acc.view(in.sizes()));
      },
      timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
#if CHORUS_TORCH_BACKEND_API
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse)
    return allreduce_sparse(tensors, opts);
#endif
  checkSingle(rank_, "all_reduce", tensors);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor t = tensors[0];
    return bitwise("all_reduce", c10d::OpType::ALLREDUCE, tensors, t, opts.reduceOp.op_,
                   opts.timeout, [t](const at::Tensor& r) mutable { t.copy_(r); });
  }
  const chorusDataType_t type = reduceType(rank_, "all_reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "all_reduce", opts.reduceOp, tensors[0]);
  chorusComm_t comm = engine_->comm();
  if (tensors[0].is_contiguous() && opts.reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM) {
    // the common case: no copies, one shared_ptr less
    at::Tensor t = tensors[0];
    return collective(
        c10d::OpType::ALLREDUCE, tensors,
        [t, comm, type, op] {
          check(chorusAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type, op, comm,
                                nullptr),
                comm, "all_reduce");
        },
        opts.timeout);
  }
  auto d = std::make_shared<Dense>(tensors[0]);
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::ALLREDUCE, tensors,
      [d, comm, type, op, rop] {
        premultiply(rop, d->work);
        check(chorusAllReduce(d->work.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type,
                              op, comm, nullptr),
              comm, "all_reduce");
        d->copyBack();
      },
      opts.timeout);
}

#if CHORUS_TORCH_BACKEND_API
// Sparse (COO) all_reduce, SUM only, as gloo does it: every rank learns every rank's nnz and
// shape (an AllGather of a fixed-size record), then every rank's indices and values (AllGathers
// padded to the largest nnz); their concatenation, coalesced, sums duplicates. Every rank folds
// the same data in the same order, so all get the same tensor, written into the input (copy_).
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  if (tensors.size() != 1)
    refuse(rank_, "all_reduce",
           "expects one tensor per process, got " + std::to_string(tensors.size()));
  at::Tensor t = tensors[0];
  if (!t.defined() || t.layout() != at::kSparse || !t.device().is_cpu())
    refuse(rank_, "all_reduce", "sparse all_reduce takes one sparse COO CPU tensor");
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM)
    refuse(rank_, "all_reduce", "sparse tensors reduce with SUM only (as with gloo)");
  if (t.dim() > kSparseMaxDims)
    refuse(rank_, "all_reduce",
           "sparse tensors of more than " + std::to_string(kSparseMaxDims) +
               " dimensions are not supported");
  chorusComm_t comm = engine_->comm();
  const int n = size_, me = rank_;
  return collective(
      c10d::OpType::ALLREDUCE, tensors,
      [t, comm, n, me]() mutable {
        at::Tensor in = t.coalesce();
        const at::Tensor idx = in._indices().contiguous();  // [sparseDim, nnz] int64
        const at::Tensor val = in._values().contiguous();   // [nnz, dense sizes...]
        // The record: nnz, sparseDim, denseDim, dtype, then the sizes (dim() of them).
        std::vector<int64_t> mine(kSparseRecord, -1), all(kSparseRecord * size_t(n));
        mine[0] = in._nnz();
        mine[1] = in.sparse_dim();
        mine[2] = in.dense_dim();
        mine[3] = int64_t(in.scalar_type());
        for (int64_t d = 0; d < in.dim(); ++d) mine[4 + size_t(d)] = in.size(d);
        check(chorusAllGather(mine.data(), all.data(), kSparseRecord, chorusInt64, comm, nullptr),
              comm, "all_reduce (sparse shapes)");
        int64_t maxNnz = 0;
        for (int r = 0; r < n; ++r) {
          const int64_t* rec = all.data() + kSparseRecord * size_t(r);
          for (size_t k = 1; k < kSparseRecord; ++k)
            if (rec[k] != mine[k])
              TORCH_CHECK(false, "chorus all_reduce (rank ", me, "): rank ", r,
                          "'s sparse tensor differs in shape, sparse/dense dims or dtype "
                          "from this rank's");
          maxNnz = std::max(maxNnz, rec[0]);
        }
        const int64_t sd = in.sparse_dim();
        std::vector<int64_t> valShape(val.sizes().begin(), val.sizes().end());
        valShape[0] = maxNnz;
        at::Tensor myIdx = at::zeros({sd, maxNnz}, idx.options());
        at::Tensor myVal = at::zeros(valShape, val.options());
        if (in._nnz() > 0) {
          myIdx.narrow(1, 0, in._nnz()).copy_(idx);
          myVal.narrow(0, 0, in._nnz()).copy_(val);
        }
        std::vector<int64_t> allValShape = valShape;
        allValShape[0] = maxNnz * n;
        at::Tensor allIdx = at::empty({int64_t(n), sd, maxNnz}, idx.options());
        at::Tensor allVal = at::empty(allValShape, val.options());
        if (nbytes(myIdx) > 0)
          check(chorusAllGather(myIdx.data_ptr(), allIdx.data_ptr(), nbytes(myIdx), chorusInt8,
                                comm, nullptr),
                comm, "all_reduce (sparse indices)");
        if (nbytes(myVal) > 0)
          check(chorusAllGather(myVal.data_ptr(), allVal.data_ptr(), nbytes(myVal), chorusInt8,
                                comm, nullptr),
                comm, "all_reduce (sparse values)");
        std::vector<at::Tensor> idxs, vals;
        for (int r = 0; r < n; ++r) {
          const int64_t nnz = all[kSparseRecord * size_t(r)];
          idxs.push_back(allIdx[r].narrow(1, 0, nnz));
          vals.push_back(allVal.narrow(0, maxNnz * r, nnz));
        }
        at::Tensor sum =
            at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), in.sizes(), in.options())
                .coalesce();
        t.copy_(sum);
      },
      opts.timeout);
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<std::shared_ptr<Dense>> ds;
  std::vector<chorusDataType_t> types;
  for (auto& t : tensors) {
    checkTensor(rank_, "all_reduce_coalesced", t);
    types.push_back(reduceType(rank_, "all_reduce_coalesced", t));
    ds.push_back(std::make_shared<Dense>(t));
  }
  if (isBitwise(opts.reduceOp))
    refuse(rank_, "all_reduce_coalesced", "BAND, BOR and BXOR: use all_reduce per tensor");
  if (tensors.empty()) return completed(c10d::OpType::ALLREDUCE_COALESCED, tensors);
  const chorusRedOp_t op = redOp(rank_, "all_reduce_coalesced", opts.reduceOp, tensors[0]);
  chorusComm_t comm = engine_->comm();
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::ALLREDUCE_COALESCED, tensors,
      [ds, types, comm, op, rop] {
        for (auto& d : ds) premultiply(rop, d->work);
        grouped(comm, "all_reduce_coalesced", ds.size(), [&](size_t i) {
          return chorusAllReduce(ds[i]->work.data_ptr(), ds[i]->work.data_ptr(),
                                 size_t(ds[i]->work.numel()), types[i], op, comm, nullptr);
        });
        for (auto& d : ds) d->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  checkSingle(rank_, "reduce", tensors);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "reduce", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  const bool isRoot = root == rank_;
  if (isBitwise(opts.reduceOp)) {
    at::Tensor t = tensors[0];
    return bitwise("reduce", c10d::OpType::REDUCE, tensors, t, opts.reduceOp.op_, opts.timeout,
                   [t, isRoot](const at::Tensor& r) mutable {
                     if (isRoot) t.copy_(r);
                   });
  }
  const chorusDataType_t type = reduceType(rank_, "reduce", tensors[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce", opts.reduceOp, tensors[0]);
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  const c10d::ReduceOp rop = opts.reduceOp;
  return collective(
      c10d::OpType::REDUCE, tensors,
      [d, comm, type, op, root, isRoot, rop] {
        at::Tensor in = d->work;
        if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {  // a non-root's tensor is only an input
          in = isRoot ? d->work : d->work.clone();
          premultiply(rop, in);
        }
        check(chorusReduce(in.data_ptr(), d->work.data_ptr(), size_t(d->work.numel()), type, op,
                           root, comm, nullptr),
              comm, "reduce");
        if (isRoot) d->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkGatherShapes(rank_, size_, "all_gather_into_tensor", output, input);
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::_ALLGATHER_BASE, {output},
      [in, out, comm] {
        check(chorusAllGather(in.data_ptr(), out->work.data_ptr(), nbytes(in), chorusInt8, comm,
                              nullptr),
              comm, "all_gather_into_tensor");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  checkSingle(rank_, "all_gather", inputs);
  if (outputs.size() != 1) refuse(rank_, "all_gather", "expects one output list per process");
  checkList(rank_, "all_gather", outputs[0], inputs[0], size_t(size_));
  at::Tensor in = inputs[0].contiguous();
  std::vector<at::Tensor> outs = outputs[0];
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      c10d::OpType::ALLGATHER, outs,
      [in, outs, comm, n] {
        at::Tensor flat = at::empty({int64_t(n) * in.numel()}, in.options());
        check(
            chorusAllGather(in.data_ptr(), flat.data_ptr(), nbytes(in), chorusInt8, comm, nullptr),
            comm, "all_gather");
        for (int r = 0; r < n; ++r)
          outs[size_t(r)].copy_(
              flat.narrow(0, r * in.numel(), in.numel()).view(outs[size_t(r)].sizes()));
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  // Each input is gathered on its own, in order: every rank issues the same sequence.
  if (outputs.size() != size_t(size_))
    refuse(rank_, "all_gather_coalesced", "expects one output list per rank");
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size_; ++r) {
      if (outputs[size_t(r)].size() != inputs.size())
        refuse(rank_, "all_gather_coalesced", "output lists must match the input list");
      outs[0].push_back(outputs[size_t(r)][i]);
    }
    std::vector<at::Tensor> in{inputs[i]};
    works.push_back(allgather(outs, in, opts));
  }
  auto done = makeWork(c10d::OpType::ALLGATHER_COALESCED, {});
  engine_->submit(done, [works] {
    for (auto& w : works) w->wait();
  });
  return done;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  checkSingle(rank_, "gather", inputs);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "gather", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    if (outputs.size() != 1) refuse(rank_, "gather", "the root expects one output list");
    checkList(rank_, "gather", outputs[0], inputs[0], size_t(size_));
    outs = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    refuse(rank_, "gather", "only the root passes an output list");
  }
  at::Tensor in = inputs[0].contiguous();
  chorusComm_t comm = engine_->comm();
  const int n = size_;
  return collective(
      c10d::OpType::GATHER, outs,
      [in, outs, comm, n, root] {
        at::Tensor flat;
        if (!outs.empty()) flat = at::empty({int64_t(n) * in.numel()}, in.options());
        check(chorusGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, nbytes(in),
                           chorusInt8, root, comm, nullptr),
              comm, "gather");
        for (size_t r = 0; r < outs.size(); ++r)
          outs[r].copy_(flat.narrow(0, int64_t(r) * in.numel(), in.numel()).view(outs[r].sizes()));
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  checkSingle(rank_, "scatter", outputs);
  if (opts.rootRank < 0 || opts.rootRank >= size_)
    refuse(rank_, "scatter", "root " + std::to_string(opts.rootRank) + " out of range");
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    if (inputs.size() != 1) refuse(rank_, "scatter", "the root expects one input list");
    checkList(rank_, "scatter", inputs[0], outputs[0], size_t(size_));
    std::vector<at::Tensor> parts;
    for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    refuse(rank_, "scatter", "only the root passes an input list");
  }
  auto out = std::make_shared<Dense>(outputs[0]);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::SCATTER, outputs,
      [flat, out, comm, root] {
        check(chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, out->work.data_ptr(),
                            nbytes(out->work), chorusInt8, root, comm, nullptr),
              comm, "scatter");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  checkSingle(rank_, "reduce_scatter", outputs);
  if (inputs.size() != 1) refuse(rank_, "reduce_scatter", "expects one input list per process");
  checkList(rank_, "reduce_scatter", inputs[0], outputs[0], size_t(size_));
  std::vector<at::Tensor> parts;
  for (auto& t : inputs[0]) parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(parts);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor o = outputs[0];
    const int64_t me = rank_, each = o.numel();
    return bitwise("reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, flat, opts.reduceOp.op_,
                   opts.timeout, [o, me, each](const at::Tensor& r) mutable {
                     o.copy_(r.reshape({-1}).narrow(0, me * each, each).view(o.sizes()));
                   });
  }
  const chorusDataType_t type = reduceType(rank_, "reduce_scatter", outputs[0]);
  const chorusRedOp_t op = redOp(rank_, "reduce_scatter", opts.reduceOp, outputs[0]);
  premultiply(opts.reduceOp, flat);  // flat is our own copy
  auto out = std::make_shared<Dense>(outputs[0]);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::REDUCE_SCATTER, outputs,
      [flat, out, comm, type, op] {
        check(chorusReduceScatter(flat.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()),
                                  type, op, comm, nullptr),
              comm, "reduce_scatter");
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  static constexpr const char* op = "reduce_scatter_tensor";
  checkScatterShapes(rank_, size_, op, output, input);
  if (isBitwise(opts.reduceOp)) {
    at::Tensor o = output;
    const int64_t me = rank_, each = o.numel();
    return bitwise(op, c10d::OpType::_REDUCE_SCATTER_BASE, {output}, input, opts.reduceOp.op_,
                   opts.timeout, [o, me, each](const at::Tensor& r) mutable {
                     o.copy_(r.reshape({-1}).narrow(0, me * each, each).view(o.sizes()));
                   });
  }
  const chorusDataType_t type = reduceType(rank_, op, output);
  const chorusRedOp_t rop = redOp(rank_, op, opts.reduceOp, output);
  at::Tensor in = input.contiguous();
  const c10d::ReduceOp premul = opts.reduceOp;
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::_REDUCE_SCATTER_BASE, {output},
      [in, out, comm, type, rop, premul]() mutable {
        if (premul.op_ == c10d::ReduceOp::PREMUL_SUM) {  // the input is the caller's: scale a copy
          in = in.clone();
          premultiply(premul, in);
        }
        check(chorusReduceScatter(in.data_ptr(), out->work.data_ptr(), size_t(out->work.numel()),
                                  type, rop, comm, nullptr),
              comm, op);
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  static constexpr const char* op = "all_to_all_single";
  checkTensor(rank_, op, output);
  checkTensor(rank_, op, input);
  if (output.scalar_type() != input.scalar_type())
    refuse(rank_, op, "output and input dtypes differ");
  at::Tensor in = input.contiguous();
  auto out = std::make_shared<Dense>(output);
  chorusComm_t comm = engine_->comm();
  const int n = size_, me = rank_;
  if (outputSplits.empty() && inputSplits.empty()) {
    if (in.numel() != output.numel() || in.numel() % n != 0)
      refuse(rank_, op,
             "input and output must hold the same number of elements, a multiple of "
             "the world size");
    return collective(
        c10d::OpType::ALLTOALL_BASE, {output},
        [in, out, comm, n] {
          check(chorusAlltoAll(in.data_ptr(), out->work.data_ptr(), nbytes(in) / size_t(n),
                               chorusInt8, comm, nullptr),
                comm, op);
          out->copyBack();
        },
        opts.timeout);
  }
  // Uneven splits, counted in rows of dimension 0: one send and one receive per peer, grouped.
  auto offsets = [&](std::vector<int64_t> splits, const at::Tensor& t, const char* which) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      if (rows % n != 0) refuse(me, op, std::string(which) + " rows not divisible by world size");
      splits.assign(size_t(n), rows / n);
    }
    if (splits.size() != size_t(n))
      refuse(me, op, std::string(which) + " split sizes must have world size entries");
    int64_t sum = 0;
    for (int64_t s : splits) {
      if (s < 0) refuse(me, op, std::string(which) + " split sizes must be >= 0");
      sum += s;
    }
    if (sum != rows)
      refuse(me, op,
             std::string(which) + " split sizes add up to " + std::to_string(sum) +
                 ", the tensor has " + std::to_string(rows) + " rows");
    const size_t rowBytes = rows ? nbytes(t) / size_t(rows) : 0;
    std::vector<size_t> off(size_t(n) + 1, 0);
    for (int p = 0; p < n; ++p)
      off[size_t(p) + 1] = off[size_t(p)] + size_t(splits[size_t(p)]) * rowBytes;
    return off;
  };
  if (in.dim() > 1 && output.dim() > 1 &&
      in.numel() / std::max<int64_t>(1, in.size(0)) !=
          output.numel() / std::max<int64_t>(1, output.size(0)))
    refuse(rank_, op, "input and output rows differ in size");
  const std::vector<size_t> sendOff = offsets(inputSplits, in, "input");
  const std::vector<size_t> recvOff = offsets(outputSplits, output, "output");
  if (sendOff[size_t(me) + 1] - sendOff[size_t(me)] !=
      recvOff[size_t(me) + 1] - recvOff[size_t(me)])
    refuse(me, op, "the split sizes for itself differ between input and output");
  return collective(
      c10d::OpType::ALLTOALL_BASE, {output},
      [in, out, comm, n, me, sendOff, recvOff] {
        std::vector<Block> blocks(static_cast<size_t>(n));
        for (size_t p = 0; p < size_t(n); ++p)
          blocks[p] = {bytesOf(in) + sendOff[p], sendOff[p + 1] - sendOff[p],
                       bytesOf(out->work) + recvOff[p], recvOff[p + 1] - recvOff[p]};
        exchange(comm, me, blocks, op);
        out->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  static constexpr const char* op = "all_to_all";
  if (outputs.size() != size_t(size_) || inputs.size() != size_t(size_))
    refuse(rank_, op, "expects world size input and output tensors");
  std::vector<at::Tensor> ins;
  std::vector<std::shared_ptr<Dense>> outs;
  for (int p = 0; p < size_; ++p) {
    checkTensor(rank_, op, inputs[size_t(p)]);
    checkTensor(rank_, op, outputs[size_t(p)]);
    if (inputs[size_t(p)].scalar_type() != outputs[size_t(p)].scalar_type())
      refuse(rank_, op, "output and input dtypes differ");
    ins.push_back(inputs[size_t(p)].contiguous());
    outs.push_back(std::make_shared<Dense>(outputs[size_t(p)]));
  }
  if (nbytes(ins[size_t(rank_)]) != nbytes(outs[size_t(rank_)]->work))
    refuse(rank_, op, "this rank's own input and output sizes differ");
  chorusComm_t comm = engine_->comm();
  const int n = size_, me = rank_;
  return collective(
      c10d::OpType::ALLTOALL, outputs,
      [ins, outs, comm, n, me] {
        std::vector<Block> blocks(static_cast<size_t>(n));
        for (size_t p = 0; p < size_t(n); ++p)
          blocks[p] = {bytesOf(ins[p]), nbytes(ins[p]), bytesOf(outs[p]->work),
                       nbytes(outs[p]->work)};
        exchange(comm, me, blocks, op);
        for (auto& o : outs) o->copyBack();
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor t = barrierToken_;
  chorusComm_t comm = engine_->comm();
  return collective(
      c10d::OpType::BARRIER, {},
      [t, comm] {
        check(chorusAllReduce(t.data_ptr(), t.data_ptr(), 1, chorusUint8, chorusMax, comm, nullptr),
              comm, "barrier");
      },
      opts.timeout);
}

}  // namespace chorus_torch
