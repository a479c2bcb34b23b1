#include "runtime/unplanned_placement.h"

#include "base/log.h"
#include "base/status_macros.h"

namespace autouvm::runtime {
// Note [The budget from load]: a plan keeps a model within its device budget once it is prepared, but a
// model is on the device before it has any plan: loaded with `module.to(cuda)` (or its weights generated
// there), it sat wholly on the device until its first plan was prepared, and every iteration that
// follows no plan (the recorded ones at load, a run again after a plan stopped) faulted its weights back
// in, past the budget, for the next plan to evict at 12-16 GB/s (issue 26: an 8B-class model with a
// 9.1 GB budget held its 18 GB until its second request, which paid 1.1-1.8 s to evict them; with
// several models on one card such a model takes the others' memory). So until a plan owns the
// residency, and again whenever the model runs without one, its weights have a placement of their own.
// A model whose weights fit its budget keeps them on the device. A larger one has each weight read in
// place from host memory — preferred location host, mapped for the device, as a plan's remote tensors
// are — which the GPU reads at the link's rate with no migration and nothing left resident (51 GB/s on
// the H200, ../shared/gpu/NOTES.md): an iteration without a plan costs about one sweep, not a
// fault-driven migration of everything (8.6 GB/s). At load each weight is placed as it reaches the
// device, behind its own copy on the compute stream, so the model is never more than one weight over
// its budget. A plan's preparation lifts the advice and places the weights its own way
// (profiler/model_execution.cc); before a later iteration without a plan, what that plan left on the
// device stays there while it fits the budget less the KV rows in use, and the rest is read in place.
// Nothing is brought onto the device but by a plan: the UVM driver keeps the memory of pages it moves
// off the device, so a placement of its own on the device (the first weights that fit, say) would have
// added the pages of the first plan's pinned set that it did not share to the device memory in use (on
// the H200's 7B at factor 2.0, nvidia-smi's memory.used rose from 7.6 to 11.0 GiB at the first plan's
// preparation, against a 6.9 GiB budget).
// On CUDA weights under 2 MiB share the allocator's VA blocks with their neighbours, which advice and
// prefetches act on whole, so they are always kept (a Llama's norms; a toy model made only of such
// weights is not held to a budget below them). The CPU daemon's mirror gives every tensor a range of its
// own and places them all.
UnplannedPlacement::UnplannedPlacement(DeviceBackend* backend, int64_t budget_bytes, int64_t min_in_place_bytes)
    : backend_(backend), budget_bytes_(budget_bytes), min_in_place_bytes_(min_in_place_bytes) {}

bool UnplannedPlacement::OnDevice(const Weight& w) const {
  if (w.where != Where::kUnknown) return w.where == Where::kDevice;
  // Staged by a plan: its device pages discarded, whatever the range's last prefetch said.
  if (backend_->StagingOf(w.addr) == DeviceBackend::Staging::kDiscarded) return false;
  const absl::StatusOr<int64_t> resident = backend_->ResidentBytes(w.addr, w.bytes);
  return resident.ok() && *resident >= w.bytes;
}

absl::Status UnplannedPlacement::ReadInPlace(Weight& w) {
  if (w.where == Where::kInPlace) return absl::OkStatus();
  RETURN_IF_ERROR(backend_->Advise(w.addr, w.bytes, Advice::kPreferredLocation, true, Location::kHost));
  RETURN_IF_ERROR(backend_->Advise(w.addr, w.bytes, Advice::kAccessedBy, true, Location::kDevice));
  // Behind whatever wrote or read it on the compute stream (its load, the last iteration's ops).
  RETURN_IF_ERROR(backend_->Prefetch(w.addr, w.bytes, Location::kHost, Stream::kCompute));
  w.where = Where::kInPlace;
  return absl::OkStatus();
}

// Note [Weights asleep as host copies]: a sleeping model's weights leave the device (Note [A model
// asleep], profiler/model_execution.cc) with no advice: no pass reads them before the next plan's
// preparation or Apply() places them, and advice set here would be lifted again at the wake, two calls a
// weight on ranges the device had mapped, on the waking pass's way. Where the backend stages, a weight of
// whole VA blocks on the device is staged out (DeviceBackend::StageOut): copied to a pinned host copy —
// or none copied where one is kept from before (Note [Host copies outlive staging]), as it is from the
// second sleep on — and its device pages discarded. The plan that wakes the model and pins it brings it
// back from that copy by an asynchronous copy at the link's rate (Executor::Prepare: Unstage to the
// device), where a migration back was a prefetch at 28-38 GB/s holding the host thread, weight by weight,
// before the waking pass could start (the H200's 7B at factor 2.0: 161-221 ms of a 351-364 ms wake,
// bench/results/2026-12-07-two-models-wake-and-staged-graphs-h200.md); and leaving takes a discard, not a
// migration to the host at 12-16 GB/s (../shared/gpu/NOTES.md). The cost is pinned host memory, the size
// of the weights the model's plans pin, held while it is loaded, as vLLM's sleep mode holds its
// weights in CPU memory. A pass that follows no plan puts them back first (ModelExecution::Suspend).
// Elsewhere the weight is prefetched to the host. A weight a plan left staged has nothing on the device.
absl::Status UnplannedPlacement::MoveToHost(Weight& w, bool on_device) {
  if (w.where == Where::kInPlace || w.where == Where::kHost) return absl::OkStatus();
  const DeviceBackend::Staging staging = backend_->StagingOf(w.addr);
  bool moved = staging == DeviceBackend::Staging::kDiscarded;
  if (staging == DeviceBackend::Staging::kNone && backend_->can_stage() && w.bytes % kSharedBlockBytes == 0 &&
      w.addr % kSharedBlockBytes == 0 && on_device) {
    // A host copy that cannot be made (pinned host memory refused, say) leaves the weight where it was:
    // it migrates instead, and the sleep goes on.
    const absl::Status staged = backend_->StageOut(w.addr, w.bytes);
    moved = staged.ok();
    if (!staged.ok() && !warned_) {
      AUTOUVM_LOG(WARNING) << "a sleeping model's weight of " << w.bytes
                           << " bytes could not be staged out to a host copy, so it migrates to the host instead ("
                           << staged.message() << "); said once per model";
      warned_ = true;
    }
  }
  if (!moved) {
    RETURN_IF_ERROR(backend_->Prefetch(w.addr, w.bytes, Location::kHost, Stream::kCompute));
  }
  w.where = Where::kHost;
  return absl::OkStatus();
}

absl::Status UnplannedPlacement::Place(uint64_t addr, int64_t bytes, int64_t all_bytes) {
  if (bytes <= 0 || budget_bytes_ <= 0) return absl::OkStatus();
  weights_.push_back({addr, bytes, Where::kDevice});
  Weight& w = weights_.back();
  if (all_bytes > budget_bytes_ && !Small(w)) {
    w.where = Where::kUnknown;  // on the device: moved with its advice set
    RETURN_IF_ERROR(ReadInPlace(w));
  }
  applied_ = true;
  applied_kv_bytes_ = 0;
  return absl::OkStatus();
}

void UnplannedPlacement::Add(uint64_t addr, int64_t bytes) {
  if (bytes <= 0) return;
  weights_.push_back({addr, bytes, Where::kUnknown});
  applied_ = false;
}

absl::Status UnplannedPlacement::Apply(int64_t kv_bytes) {
  if (budget_bytes_ <= 0 || (applied_ && kv_bytes == applied_kv_bytes_)) return absl::OkStatus();
  RETURN_IF_ERROR(Keep(budget_bytes_ - kv_bytes, /*advise=*/true));
  applied_kv_bytes_ = kv_bytes;
  return absl::OkStatus();
}

absl::Status UnplannedPlacement::Shrink(int64_t keep_bytes) {
  RETURN_IF_ERROR(Keep(keep_bytes, /*advise=*/false));
  applied_kv_bytes_ = -1;  // the next Apply() places them for its budget again
  return absl::OkStatus();
}

absl::Status UnplannedPlacement::Keep(int64_t room, bool advise) {
  int64_t kept = 0;
  for (Weight& w : weights_) {
    if (!Small(w)) continue;
    w.where = Where::kDevice;  // where the device's first touch puts it
    kept += w.bytes;
  }
  for (Weight& w : weights_) {
    if (Small(w)) continue;
    const bool on_device = OnDevice(w);
    if (on_device && kept + w.bytes <= room) {
      w.where = Where::kDevice;
      kept += w.bytes;
    } else {
      RETURN_IF_ERROR(advise ? ReadInPlace(w) : MoveToHost(w, on_device));
    }
  }
  applied_ = true;
  return absl::OkStatus();
}

absl::Status UnplannedPlacement::Lift() {
  if (!applied_) return absl::OkStatus();
  for (Weight& w : weights_) {
    if (w.where == Where::kInPlace) {
      RETURN_IF_ERROR(backend_->Advise(w.addr, w.bytes, Advice::kAccessedBy, false, Location::kDevice));
      RETURN_IF_ERROR(backend_->Advise(w.addr, w.bytes, Advice::kPreferredLocation, false, Location::kHost));
    }
    w.where = Where::kUnknown;  // the plan moves it
  }
  applied_ = false;
  applied_kv_bytes_ = -1;
  return absl::OkStatus();
}

int64_t UnplannedPlacement::kept_bytes() const {
  int64_t sum = 0;
  for (const Weight& w : weights_) {
    if (w.where == Where::kDevice) sum += w.bytes;
  }
  return sum;
}

int64_t UnplannedPlacement::in_place_bytes() const {
  int64_t sum = 0;
  for (const Weight& w : weights_) {
    if (w.where == Where::kInPlace || w.where == Where::kHost) sum += w.bytes;
  }
  return sum;
}

}  // namespace autouvm::runtime
