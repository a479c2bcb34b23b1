#include "runtime/compute_device.h"

namespace autouvm::runtime {
namespace {

class CpuDevice final : public ComputeDevice {
 public:
  std::string_view kind() const override { return "cpu"; }
  DeviceBackend* backend() override { return nullptr; }
  int64_t managed_bytes() const override { return 0; }
  std::unique_ptr<ThreadScope> Enter() override { return nullptr; }
};

}  // namespace

std::unique_ptr<ComputeDevice> NewCpuDevice() { return std::make_unique<CpuDevice>(); }

}  // namespace autouvm::runtime
