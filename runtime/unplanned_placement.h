// UnplannedPlacement: where a model's weights are while no plan owns their residency — as each is
// loaded, until its first plan is prepared, and in iterations that follow no plan — so that the model
// holds no more than its device budget even then (Note [The budget from load], unplanned_placement.cc).
//
//   UnplannedPlacement place(backend, budget_bytes);
//   RETURN_IF_ERROR(place.Place(addr, bytes, all_bytes));   // at load: a weight that has just reached the device
//   place.Add(addr, bytes);                      // or: a weight wherever it is now (placed by Apply)
//   RETURN_IF_ERROR(place.Apply(kv_bytes));      // before an iteration that follows no plan
//   RETURN_IF_ERROR(place.Lift());               // before a plan's executor places the weights its own way
//   RETURN_IF_ERROR(place.Shrink(floor_bytes));  // an idle model gives its device memory back
//
// A model whose weights fit its budget keeps them on the device. Otherwise its weights are read in place
// from host memory (preferred location host, mapped for the device) from load on, but for those the last
// plan left on the device, which stay while they fit the budget less the KV rows in use. Weights under
// `min_in_place_bytes` are always kept: on CUDA the allocator packs tensors under 2 MiB into shared VA
// blocks, which advice and prefetches act on whole.
//
// Not thread-safe: the model's loading thread, then its scheduler thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "runtime/device_backend.h"

namespace autouvm::runtime {

class UnplannedPlacement {
 public:
  static constexpr int64_t kSharedBlockBytes = int64_t{2} << 20;
  // `backend` outlives this; a budget of 0 or less keeps every weight where it is.
  UnplannedPlacement(DeviceBackend* backend, int64_t budget_bytes, int64_t min_in_place_bytes = kSharedBlockBytes);

  // A weight that has just reached the device, its copy queued on the compute stream, of a model whose
  // weights are `all_bytes` together: kept there if they all fit the budget, else moved to the host behind
  // that copy and read in place from then on (unless small).
  absl::Status Place(uint64_t addr, int64_t bytes, int64_t all_bytes);
  // A weight wherever it is now: placed by the next Apply().
  void Add(uint64_t addr, int64_t bytes);

  // Places every weight for an iteration that follows no plan while `kv_bytes` of KV rows are in use:
  // what is on the device stays while it fits, in the order the weights came; the rest is read in
  // place. Nothing is brought onto the device, and nothing moves when the placement holds already.
  absl::Status Apply(int64_t kv_bytes);
  // Note [A model asleep] (profiler/model_execution.cc): keeps on the device at most `keep_bytes` of the
  // weights there now (small ones always; then in the order the weights came); the rest leave it with no
  // advice (none to lift when a plan wakes the model), staged out as host copies where the backend stages,
  // else moved to the host (Note [Weights asleep as host copies], unplanned_placement.cc) — for a model
  // with no KV rows in use, whatever its budget. Staged weights are put back before the next Apply(),
  // which places them again (read in place); a plan adopts them.
  absl::Status Shrink(int64_t keep_bytes);
  // Clears the advice Apply(), Place() or Shrink() set, for a plan's executor to place the weights its own way;
  // the next Apply() places them all again.
  absl::Status Lift();

  bool applied() const { return applied_; }
  // Of the weights, as of the last Place(), Apply() or Shrink(): bytes kept on the device, and bytes off it
  // (read in place; or, after Shrink(), on the host until the next Apply() or plan).
  int64_t kept_bytes() const;
  int64_t in_place_bytes() const;
  int64_t budget_bytes() const { return budget_bytes_; }

 private:
  enum class Where { kUnknown, kDevice, kInPlace, kHost };  // kHost: off the device by Shrink(), no advice
  struct Weight {
    uint64_t addr = 0;
    int64_t bytes = 0;
    Where where = Where::kUnknown;
  };
  bool Small(const Weight& w) const { return w.bytes < min_in_place_bytes_; }
  // Whether the weight is on the device now: as placed, or (unknown) as the backend says.
  bool OnDevice(const Weight& w) const;
  absl::Status ReadInPlace(Weight& w);
  absl::Status MoveToHost(Weight& w, bool on_device);  // `on_device`: OnDevice(w), as the caller found it
  // Keeps what is on the device within `room` bytes (small weights first, always); the rest read in
  // place, or only moved to the host where `advise` is false.
  absl::Status Keep(int64_t room, bool advise);

  DeviceBackend* const backend_;
  const int64_t budget_bytes_;
  const int64_t min_in_place_bytes_;
  std::vector<Weight> weights_;  // in the order placed or added
  bool applied_ = false;         // every weight is where the last Place()s or Apply() put it
  int64_t applied_kv_bytes_ = -1;
  bool warned_ = false;  // that a weight could not be staged out
};

}  // namespace autouvm::runtime
