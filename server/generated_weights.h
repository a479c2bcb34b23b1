// Generated weights (docs/model-contract.md): replaces a model's placeholder parameters with seeded
// random normals, made directly on `device` — on the GPU, inside a ManagedMemoryPool scope, they land
// in managed memory with no host copy ever made. For model entries with generated_weights_seed.
//
//   torch::jit::Module m = torch::jit::load(path);
//   RETURN_IF_ERROR(GenerateWeights(m, config.generated_weights_seed, torch::kCUDA));
//
// Thread-safety: seeds libtorch's process-wide generators; callers serialize (model loads do).
#pragma once

#include <torch/script.h>

#include <cstdint>

#include "absl/status/status.h"

namespace autouvm::server {

// INVALID_ARGUMENT for seed 0; INTERNAL if libtorch fails.
absl::Status GenerateWeights(torch::jit::Module& module, int64_t seed, const torch::Device& device);

}  // namespace autouvm::server
