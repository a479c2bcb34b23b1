// The libtorch dtype for a model.yaml dtype name ("fp32", "bf16", "fp16"). Internal to the two
// translation units that include libtorch (llama_builder.cc, model_runner.cc); keep it out of others.
#pragma once

#include <torch/script.h>

#include <string>

namespace autouvm::engine {

inline c10::ScalarType TorchDtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kHalf;
  return torch::kFloat;
}

}  // namespace autouvm::engine
