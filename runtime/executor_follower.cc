// PlanFollower (runtime/executor.h): an Executor driven from the Observer's op boundaries, checking each
// op against the plan's.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/executor.h"

namespace autouvm::runtime {

PlanFollower::PlanFollower(Executor* executor, const AccessTrace& trace) : executor_(executor) {
  kernels_.reserve(trace.ops.size());
  for (const OpRecord& op : trace.ops) kernels_.push_back(op.kernel);
}

// Note [Stopping with staged weights]: a staged weight's managed range holds nothing until the executor
// brings it in, so ops left to the driver after following stops would read discarded pages, not fault
// the weight in. Stopping therefore puts every staged weight back in managed memory first (synchronous:
// ~1 s per GiB on the H200). The op whose kernel differed has already been launched and may have read
// such a range: the iteration's result is not to be trusted (its status says so).
void PlanFollower::Stop(absl::Status why) {
  stopped_ = true;
  if (executor_->stages()) {
    if (absl::Status released = executor_->Release(); !released.ok()) {
      why = absl::Status(why.code(),
                         absl::StrCat(why.message(), "; putting the staged weights back: ", released.message()));
    }
  }
  status_ = std::move(why);
}

void PlanFollower::BeforeOp(int64_t index) {
  if (stopped_) return;
  if (absl::Status s = executor_->BeforeOp(index); !s.ok()) Stop(s);
}

void PlanFollower::OnOp(const OpEvent& op) {
  const size_t i = static_cast<size_t>(op.index);
  const bool differs = i >= kernels_.size() || kernels_[i] != op.kernel;
  ++ops_seen_;
  if (differs) ++differing_ops_;  // counted after stopping too: how far the iteration is from the plan
  if (stopped_) return;
  if (differs) {
    ++mismatches_;
    Stop(absl::FailedPreconditionError(absl::StrCat(
        "op ", op.index, " is ", std::string(op.kernel), ", the plan expected ",
        i < kernels_.size() ? kernels_[i]
                            : std::string("none (the plan has ") + std::to_string(kernels_.size()) + " ops)")));
    return;
  }
  if (absl::Status s = executor_->AfterOp(op.index); !s.ok()) {
    Stop(s);
    return;
  }
  ++ops_followed_;
}

absl::Status PlanFollower::EndIteration() {
  const int64_t planned = static_cast<int64_t>(kernels_.size());
  if (ops_seen_ < planned) differing_ops_ += planned - ops_seen_;  // the plan's ops that never ran
  if (!stopped_ && ops_followed_ != planned) {
    ++mismatches_;
    Stop(absl::FailedPreconditionError(
        absl::StrCat("the iteration ran ", ops_followed_, " ops, the plan has ", kernels_.size())));
  }
  last_differing_ops_ = differing_ops_;
  last_ops_compared_ = std::max(ops_seen_, planned);
  ops_seen_ = 0;
  differing_ops_ = 0;
  if (stopped_) executor_->AbandonIteration();
  absl::Status why = std::move(status_);
  status_ = absl::OkStatus();
  stopped_ = false;
  ops_followed_ = 0;
  return why;
}

void PlanFollower::Replayed() {
  const auto planned = static_cast<int64_t>(kernels_.size());
  ops_seen_ = planned;
  ops_followed_ = planned;
}

absl::Status PlanFollower::Followed() const {
  if (stopped_) return status_;
  if (ops_followed_ != static_cast<int64_t>(kernels_.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("the pass followed ", ops_followed_, " of its plan's ", kernels_.size(), " ops"));
  }
  return absl::OkStatus();
}

void PlanFollower::Abandon(absl::Status why) {
  if (stopped_) return;
  stopped_ = true;
  status_ = std::move(why);
}

}  // namespace autouvm::runtime
