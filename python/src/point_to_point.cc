// ProcessGroupChorus's point-to-point operations (process_group.h): send and recv are deferred
// on the engine until a wait, the next collective or the end of a coalescing block starts the
// batch as one Chorus group.
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "process_group.h"
#include "tensor_args.h"

namespace chorus_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int /*tag*/) {
  checkSingle(rank_, "send", tensors);
  if (dstRank < 0 || dstRank >= size_ || dstRank == rank_)
    refuse(rank_, "send", "destination " + std::to_string(dstRank) + " is not another rank");
  at::Tensor t = tensors[0].contiguous();
  chorusComm_t comm = engine_->comm();
  auto work = makeWork(c10d::OpType::SEND, tensors, /*deferred=*/true);
  engine_->defer(work, [t, comm, dstRank] {
    if (nbytes(t))
      check(chorusSend(t.data_ptr(), nbytes(t), chorusInt8, dstRank, comm, nullptr), comm, "send");
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int /*tag*/) {
  checkSingle(rank_, "recv", tensors);
  if (srcRank < 0 || srcRank >= size_ || srcRank == rank_)
    refuse(rank_, "recv", "source " + std::to_string(srcRank) + " is not another rank");
  // A non-contiguous destination is filled from a contiguous copy once the group has ended.
  auto d = std::make_shared<Dense>(tensors[0]);
  chorusComm_t comm = engine_->comm();
  auto work = makeWork(c10d::OpType::RECV, tensors, /*deferred=*/true);
  std::function<void()> post;
  if (!d->work.is_same(d->user)) post = [d] { d->copyBack(); };
  engine_->defer(
      work,
      [d, comm, srcRank] {
        if (nbytes(d->work))
          check(chorusRecv(d->work.data_ptr(), nbytes(d->work), chorusInt8, srcRank, comm, nullptr),
                comm, "recv");
      },
      std::move(post));
  return work;
}

// A receive from whichever rank's send to this one comes first (chorusRecvAny): the work's
// sourceRank() is that rank once it has completed. Deferred like recv; messages from one rank
// arrive in the order it sent them.
c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int /*tag*/) {
  checkSingle(rank_, "recv", tensors);
  if (size_ < 2) refuse(rank_, "recv", "receiving from any source needs another rank");
  auto d = std::make_shared<Dense>(tensors[0]);
  if (nbytes(d->work) == 0)
    refuse(rank_, "recv", "receiving an empty tensor from any source matches no message");
  chorusComm_t comm = engine_->comm();
  auto source = std::make_shared<int>(-1);
  auto work = makeWork(c10d::OpType::RECVANYSOURCE, tensors, /*deferred=*/true);
  work->setSource(source);
  std::function<void()> post;
  if (!d->work.is_same(d->user)) post = [d] { d->copyBack(); };
  engine_->defer(
      work,
      [d, comm, source] {
        check(chorusRecvAny(d->work.data_ptr(), nbytes(d->work), chorusInt8, source.get(), comm,
                            nullptr),
              comm, "recv");
      },
      std::move(post));
  return work;
}

}  // namespace chorus_torch
