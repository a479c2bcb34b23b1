// bench/preset_daemon.h where the build has no CUDA: the presets are generated on the GPU.
#include "bench/bench_util.h"
#include "bench/preset_daemon.h"

namespace autouvm::bench {

ServedModel WritePresetDaemonConfig(const std::string&, const std::string& preset, double, int, int64_t) {
  Die("--preset " + preset + " needs the GPU host's build (CUDA); this one serves --cpu only");
}

}  // namespace autouvm::bench
