// DeviceBudgets: the device memory the served models' budgets take, kept so that together with a reserve
// they fit the GPU (Note [Budgets that hold together], device_budgets.cc).
//
//   DeviceBudgets budgets(gpu.memory_bytes, reserve_bytes, gpu.name);
//   ASSIGN_OR_RETURN(int64_t bytes, budgets.Take("a", int64_t{8} << 30));
//   budgets.Give("a");                                              // unloaded, or failed to load
//
// Not thread-safe: the model manager holds it under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace autouvm::server {

class DeviceBudgets {
 public:
  DeviceBudgets(int64_t device_bytes, int64_t reserve_bytes, std::string gpu);

  // Takes `bytes` of the device for `model`'s budget, or RESOURCE_EXHAUSTED naming the GPU's memory, the
  // reserve and every model's budget, when they would not fit together; `share`: the budget is the model's
  // share of what is left (device_budget 0), not its own.
  absl::StatusOr<int64_t> Take(const std::string& model, int64_t bytes, bool share = false);
  // The budget `model` held goes back (nothing if it held none).
  void Give(const std::string& model);

  // What the reserve and the budgets taken leave of the device.
  int64_t free_bytes() const;
  int64_t reserve_bytes() const { return reserve_; }
  int64_t device_bytes() const { return device_; }

 private:
  const int64_t device_;
  const int64_t reserve_;
  const std::string gpu_;
  std::map<std::string, int64_t> taken_;
};

}  // namespace autouvm::server
