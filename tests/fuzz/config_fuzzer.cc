// libFuzzer target: the daemon's config (ParseServerConfig) and a model entry's model.yaml
// (ParseModelConfig) from arbitrary text. Never crashes; an accepted model.yaml re-parses to the same
// config after it is written back out.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/model_config.h"
#include "runtime/compute_device.h"
#include "server/config.h"

// server/config.cc asks which compute backends the build has; the fuzz build links no libtorch, so this
// answers as a CPU-only build does (runtime/compute_device_cpu.cc).
namespace autouvm::runtime {
std::vector<std::string> ComputeBackends() { return {"cpu"}; }
}  // namespace autouvm::runtime

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)autouvm::server::ParseServerConfig(text, "fuzz.yaml");
  auto model = autouvm::engine::ParseModelConfig(text, "model.yaml");
  if (model.ok()) {
    auto again = autouvm::engine::ParseModelConfig(autouvm::engine::ModelConfigToYaml(*model), "again.yaml");
    if (!again.ok() || autouvm::engine::ModelConfigToYaml(*again) != autouvm::engine::ModelConfigToYaml(*model)) {
      std::abort();
    }
  }
  return 0;
}
