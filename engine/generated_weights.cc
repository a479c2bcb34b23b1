#include "engine/generated_weights.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace autouvm::engine {

std::mutex& SeededRngMutex() {
  static std::mutex mu;
  return mu;
}

void ScaleRandomWeight(const std::string& name, torch::Tensor& w) {
  if (w.dim() == 1) {
    w.mul_(0.1);
    if (absl::EndsWith(name, "norm")) w.add_(1.0);  // a norm's weight; else a bias
  } else if (!absl::EndsWith(name, "tok_embeddings")) {
    w.div_(std::sqrt(double(w.size(-1))));
  }
}

absl::Status GenerateWeights(torch::jit::Module& module, int64_t seed, const torch::Device& device,
                             const std::function<absl::Status(const torch::Tensor&)>& placed) {
  if (seed == 0) return absl::InvalidArgumentError("generated weights need a seed other than 0");
  std::lock_guard<std::mutex> lock(SeededRngMutex());
  try {
    torch::NoGradGuard no_grad;
    torch::manual_seed(static_cast<uint64_t>(seed));  // the CPU's and every GPU's default generator
    // Every module, then its own parameters in registration order: a fixed order, so a seed always
    // draws the same numbers on the same device.
    for (torch::jit::Module m : module.modules()) {
      std::vector<std::pair<std::string, torch::Tensor>> own;
      for (const auto& p : m.named_parameters(/*recurse=*/false)) own.emplace_back(p.name, p.value);
      for (const auto& [name, placeholder] : own) {
        // On the GPU straight in the model's dtype (no float temporaries left in a memory pool); the
        // CPU draws in float, which every libtorch version can.
        const auto options = torch::TensorOptions().dtype(placeholder.scalar_type()).device(device);
        const auto draw = device.is_cpu() ? options.dtype(torch::kFloat) : options;
        torch::Tensor w = torch::randn(placeholder.sizes(), draw);
        ScaleRandomWeight(name, w);
        torch::Tensor weight = w.to(options);
        m.register_parameter(name, weight, /*is_buffer=*/false);
        if (placed) {
          if (absl::Status s = placed(weight); !s.ok()) return s;
        }
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("generating the weights failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace autouvm::engine
