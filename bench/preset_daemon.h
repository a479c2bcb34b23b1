// A daemon config serving one of bench/decode_harness.h's presets on the GPU under a device budget, for
// benches that run the same measurement against the CPU's tiny model elsewhere.
//
//   const ServedModel m = WritePresetDaemonConfig(dir, "7b", /*factor=*/2.0, streams, max_seq);
//   DaemonUnderTest d = StartDaemon(AUTOUVMD_PATH, m.config_path, dir);
//   WaitModelReady(d, m.model);
//
// The implementation is chosen by the build (as runtime/compute_device.h's is): preset_daemon.cc where
// the CUDA benches are built, preset_daemon_cpu.cc elsewhere, which Die()s saying so. Call from main()
// before any other thread runs (it forks, bench/sized_entry.h).
#pragma once

#include <cstdint>
#include <string>

namespace autouvm::bench {

struct ServedModel {
  std::string config_path;
  std::string model;
  std::string about;  // one line for the bench's output: the model, its bytes and its budget
};

// Writes dir/models/bench-<preset> (weights generated on the GPU at load) and dir/autouvmd.yaml serving it
// to `max_batch` requests at once under a device budget of its weights' bytes / `factor` (policy autouvm;
// the KV cache of the batch competes for the budget).
ServedModel WritePresetDaemonConfig(const std::string& dir, const std::string& preset, double factor, int max_batch,
                                    int64_t max_seq);

}  // namespace autouvm::bench
