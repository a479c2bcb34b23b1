// Generated weights (docs/model-contract.md): replaces a model's placeholder parameters with seeded
// random normals, made directly on `device` — on the GPU, inside a ManagedMemoryPool scope, they land
// in managed memory with no host copy ever made. For model entries with generated_weights_seed.
//
//   torch::jit::Module m = torch::jit::load(path);
//   RETURN_IF_ERROR(GenerateWeights(m, config.generated_weights_seed, torch::kCUDA));
//
// Thread-safety: seeds libtorch's process-wide generators under SeededRngMutex().
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace autouvm::engine {

// Held by whoever seeds libtorch's process-wide generators and draws from them (this and the model
// builder), so that two seeded draws never interleave.
std::mutex& SeededRngMutex();

// Scales a standard normal draw `w` in place into a seeded random weight of the parameter `name` (its
// own name or a dotted path ending in it): a norm's weight 1 + 0.1 N(0,1), a bias 0.1 N(0,1), the
// embedding N(0,1), any other matrix N(0,1) / sqrt(fan_in) (docs/model-contract.md). What both the
// generated weights and the model builder's random ones are.
void ScaleRandomWeight(const std::string& name, torch::Tensor& w);

// INVALID_ARGUMENT for seed 0; INTERNAL if libtorch fails. `placed` (may be null) is called with each
// weight once it is drawn on `device`; its error stops the drawing and is returned.
absl::Status GenerateWeights(torch::jit::Module& module, int64_t seed, const torch::Device& device,
                             const std::function<absl::Status(const torch::Tensor&)>& placed = nullptr);

}  // namespace autouvm::engine
