#include "bench/preset_daemon.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/decode_harness.h"
#include "bench/sized_entry.h"
#include "runtime/gpu_spec.h"

namespace autouvm::bench {

ServedModel WritePresetDaemonConfig(const std::string& dir, const std::string& preset, double factor, int max_batch,
                                    int64_t max_seq) {
  const std::string repo = dir + "/models";
  const auto spec = Check(runtime::FindGpuSpec("h200-pcie5"), "spec");
  engine::ModelConfig c = Check(LlamaConfig(preset, 7, max_seq), "config");
  c.name = absl::StrCat("bench-", preset);
  const EntrySize size = WriteSizedEntry(c, repo, max_batch, spec);
  const auto budget = static_cast<int64_t>(static_cast<double>(size.weight_bytes) / factor);
  ServedModel m;
  m.model = c.name;
  m.config_path = WriteCudaDaemonConfig(
      dir, repo, spec.name,
      absl::StrCat("models: {", c.name, ": {max_batch: ", max_batch, ", max_queue: ", std::max(max_batch, 64),
                   ", policy: autouvm, device_budget: ", budget, "}}"));
  m.about =
      absl::StrFormat("%s on CUDA (%s): %.2f GiB of weights, %.2f GiB named, budget %.2f GiB (weights / %.2f)", c.name,
                      spec.name, size.weight_bytes / kGiB, size.named_bytes / kGiB, budget / kGiB, factor);
  return m;
}

}  // namespace autouvm::bench
