// Builds a Llama-architecture TorchScript model with seeded random weights and writes it as a model
// repository entry: <repo_dir>/<config.name>/model.pt and model.yaml (docs/model-contract.md).
//
// Used by autouvm-mkmodel, by the daemon to create its embedded default model on first start, and by
// tests. Stateless; safe to call from any thread (libtorch's RNG is seeded per call under a lock).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/model_config.h"

namespace autouvm::engine {

// Fails with INVALID_ARGUMENT (naming the field) for a bad config, or INTERNAL if libtorch fails.
absl::Status WriteLlamaModel(const ModelConfig& config, uint64_t seed, const std::string& repo_dir);

// A model of a few million parameters with the byte tokenizer and kDefaultChatTemplate (model_config.h): the daemon's
// embedded default, and what autouvm-mkmodel starts from.
ModelConfig DefaultTinyModelConfig(const std::string& name);

}  // namespace autouvm::engine
