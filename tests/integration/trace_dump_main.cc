// trace_dump MODEL_DIR PAD_BYTES: loads a model entry after allocating PAD_BYTES (so that tensors land at
// other addresses than in another run), records a prefill and a decode step, and prints the decode
// step's trace, one op per line. Prints the address of one weight to stderr, so the test can check that
// two runs really did use different addresses.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "runtime/observer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: trace_dump MODEL_DIR PAD_BYTES\n");
    return 2;
  }
  const size_t pad_bytes = std::strtoull(argv[2], nullptr, 10);
  std::vector<char> pad(pad_bytes, 1);  // moves later heap allocations
  autouvm::runtime::Observer::MakeExecutionRepeatable();
  auto config = autouvm::engine::LoadModelConfig(std::string(argv[1]) + "/model.yaml");
  if (!config.ok()) return 1;
  auto runner = autouvm::engine::ModelRunner::Create(argv[1], *config, 2);
  auto observer = autouvm::runtime::Observer::Create();
  if (!runner.ok() || !observer.ok()) return 1;
  (*runner)->NameTensors(observer->get());
  const std::vector<int32_t> prompt = {256, 10, 20, 30};
  if (!(*runner)->Prefill(1, prompt).ok()) return 1;
  std::vector<float> logits;
  autouvm::engine::ModelRunner::DecodeRow row{1, 40, 4};
  (*observer)->BeginIteration();
  if (!(*runner)->Decode({&row, 1}, &logits).ok()) return 1;
  const autouvm::runtime::AccessTrace trace = (*observer)->EndIteration();
  for (const auto& op : trace.ops) {
    std::printf("%s", op.kernel.c_str());
    for (const auto& r : op.reads) std::printf(" r:%s:%lld", r.id.c_str(), static_cast<long long>(r.bytes));
    for (const auto& w : op.writes) std::printf(" w:%s:%lld", w.id.c_str(), static_cast<long long>(w.bytes));
    std::printf(" f:%.0f\n", op.flops);
  }
  std::fprintf(stderr, "logits@%p pad=%zu\n", static_cast<void*>(logits.data()), pad.size());
  return 0;
}
