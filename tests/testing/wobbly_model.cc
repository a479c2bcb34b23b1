#include "tests/testing/wobbly_model.h"

#include <torch/script.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/llama_builder.h"
#include "engine/model_config.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {

absl::Status WriteWobblyModel(const std::string& name, const std::string& repo_dir) {
  TempDir scratch;
  const engine::ModelConfig config = engine::DefaultTinyModelConfig(name);
  if (absl::Status s = engine::WriteLlamaModel(config, 5, scratch.path()); !s.ok()) return s;
  const std::filesystem::path plain = std::filesystem::path(scratch.path()) / name;
  const std::filesystem::path entry = std::filesystem::path(repo_dir) / name;
  try {
    torch::jit::Module inner = torch::jit::load((plain / "model.pt").string());
    torch::jit::Module outer("Wobbly");
    outer.register_attribute("training", c10::BoolType::get(), false);
    outer.register_module("inner", inner);
    outer.define(R"JIT(
def forward(self, tokens, slots, start_pos, k_cache, v_cache):
    if tokens.size(1) % 2 == 1:
        start_pos = start_pos + 0
    return self.inner.forward(tokens, slots, start_pos, k_cache, v_cache)

def step(self, tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, live: int,
         k_caches: List[Tensor], v_caches: List[Tensor]):
    if tokens.size(0) % 2 == 1:
        positions = positions + 0
    return self.inner.step(tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, live, k_caches,
                           v_caches)

def full(self, tokens):
    return self.inner.full(tokens)
)JIT");
    std::filesystem::create_directories(entry);
    outer.save((entry / "model.pt").string());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("writing the wobbly model: ", e.what()));
  }
  // A module of its own (around autouvm's): run as saved, not rebuilt (Note [Layer kernels]).
  auto yaml = engine::LoadModelConfig((plain / "model.yaml").string());
  if (!yaml.ok()) return yaml.status();
  yaml->module.clear();
  std::ofstream out(entry / "model.yaml");
  out << engine::ModelConfigToYaml(*yaml);
  if (!out.good()) return absl::InternalError("writing the wobbly model's model.yaml");
  return absl::OkStatus();
}

}  // namespace autouvm::testing
