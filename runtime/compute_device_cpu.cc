// OpenComputeDevice where libtorch has no CUDA (runtime/compute_device.h): the CPU only.
#include "absl/strings/str_cat.h"
#include "runtime/compute_device.h"

namespace autouvm::runtime {

std::vector<std::string> ComputeBackends() { return {"cpu"}; }

absl::StatusOr<std::unique_ptr<ComputeDevice>> OpenComputeDevice(const ComputeDeviceOptions& options) {
  if (options.backend == "cpu") return NewCpuDevice();
  return absl::InvalidArgumentError(
      absl::StrCat("runtime.backend: '", options.backend, "' is not available in this build (cpu)"));
}

}  // namespace autouvm::runtime
