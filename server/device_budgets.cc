#include "server/device_budgets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace autouvm::server {
namespace {

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

// Note [Budgets that hold together]: each model's executor keeps it within its device budget (Note [The
// budget from load], runtime/unplanned_placement.cc), so several models share a GPU without taking each
// other's memory only if their budgets fit it together. Beside them the device holds what no budget
// counts: the CUDA context, the libraries' workspaces, each pass's activations (runtime.device_reserve).
// A model whose budget would not fit beside the reserve and the budgets of the models already served is
// refused at load, its error naming them all, and the others serve on; one that is unloaded or fails to
// load gives its budget back. A budget of 0 (models.<name>.device_budget, the default) is a share of what
// the reserve and the explicit budgets leave: the repository's models without one split it equally when
// the daemon starts, and a model without one loaded later (Admin LoadModel) asks for the same share (the
// whole of it when the daemon started with none).
DeviceBudgets::DeviceBudgets(int64_t device_bytes, int64_t reserve_bytes, std::string gpu)
    : device_(device_bytes), reserve_(reserve_bytes), gpu_(std::move(gpu)) {}

int64_t DeviceBudgets::free_bytes() const {
  int64_t left = device_ - reserve_;
  for (const auto& [model, bytes] : taken_) left -= bytes;
  return left;
}

absl::StatusOr<int64_t> DeviceBudgets::Take(const std::string& model, int64_t bytes, bool share) {
  Give(model);
  if (bytes > 0 && bytes <= free_bytes()) {
    taken_[model] = bytes;
    return bytes;
  }
  std::string others;
  for (const auto& [name, taken] : taken_) absl::StrAppend(&others, others.empty() ? "" : ", ", name, " ", GiB(taken));
  return absl::ResourceExhaustedError(
      absl::StrCat("device_budget: ", share ? absl::StrCat("0, a share of ", GiB(bytes), ",") : GiB(bytes),
                   " does not fit beside the budgets of the models served (", others.empty() ? "none" : others,
                   ") and the reserve of ", GiB(reserve_), " (runtime.device_reserve) in the GPU's ", GiB(device_),
                   " (runtime.gpu ", gpu_, "); set models.", model, ".device_budget lower, or unload a model"));
}

void DeviceBudgets::Give(const std::string& model) { taken_.erase(model); }

}  // namespace autouvm::server
