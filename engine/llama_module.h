// The Llama TorchScript module of docs/model-contract.md with weights from the caller: what
// WriteLlamaModel (engine/llama_builder.h) fills with seeded random weights and tools/autouvm-convert
// with a checkpoint's. Includes libtorch: only for the .cc files that build modules.
//
//   auto param = [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<torch::Tensor> {
//     return weights.at(name);   // "tok_embeddings", "layer0.wq", "layer0.bq", ..., "norm", "lm_head"
//   };
//   ASSIGN_OR_RETURN(torch::jit::Module m, BuildLlamaModule(config, param));
//   RETURN_IF_ERROR(WriteLlamaEntry(config, m, repo_dir, "# Converted from ...\n"));
//
// Thread-safety: pure functions of their arguments (the parameter function is called on the calling
// thread, in a fixed order).
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_config.h"

namespace autouvm::engine {

// A parameter by its name in the module (Note [Llama TorchScript layout], llama_module.cc) and the
// shape it must have; the tensor must have that shape and the config's dtype, on the CPU. Called in
// module order: tok_embeddings; per layer attn_norm, wq, [bq,] wk, [bk,] wv, [bv,] wo, mlp_norm, w_gate,
// w_up, w_down; norm; lm_head.
using LlamaParameter =
    std::function<absl::StatusOr<torch::Tensor>(const std::string& name, const std::vector<int64_t>& shape)>;

// The layer's code (Note [Layer kernels], llama_module.cc): kPortable runs on every libtorch and is what
// entries hold; kFused computes the same with fewer kernels, where FusedKernelsAvailable(); kOwn with fewer
// still, autouvm's own (Note [Own layer kernels]; engine/layer_ops.h), with joined projections: on CUDA where
// OwnKernelsAvailable(config, true), and on the CPU through reference kernels (for tests).
enum class LayerKernels { kPortable, kFused, kOwn };
bool FusedKernelsAvailable();
bool OwnKernelsAvailable(const ModelConfig& config, bool cuda);

// How a layer holds its projections: kSeparate as the model contract names them (wq, wk, wv, w_gate, w_up: what
// entries hold), kJoined as one wqkv (and bqkv) and one w_gate_up matrix, each part emptied once joined (Note
// [Joined projections], llama_module.cc).
enum class Projections { kSeparate, kJoined };

// INVALID_ARGUMENT for a bad config or a parameter of the wrong shape or dtype (named), or whatever
// the parameter function returns; FAILED_PRECONDITION for kFused or kOwn where it is not available.
absl::StatusOr<torch::jit::Module> BuildLlamaModule(const ModelConfig& config, const LlamaParameter& parameter,
                                                    LayerKernels kernels = LayerKernels::kPortable,
                                                    Projections projections = Projections::kSeparate);

// The module of an entry autouvm wrote (model.yaml `module: autouvm`), built again around `loaded`'s parameters
// with `kernels` and joined projections: the entry's weights with this build's code. The parameters that are not
// joined are the same tensors, not copies; the joined ones are emptied in `loaded`, which is not to be run after.
absl::StatusOr<torch::jit::Module> RebuildLlamaModule(const ModelConfig& config, torch::jit::Module& loaded,
                                                      LayerKernels kernels);

// The rotary tables (cos, sin), float32 [max_seq, head_dim / 2], for the config's rope_theta and
// rope_scaling, computed in float32 as Hugging Face's Llama does (so that imported models match it).
std::pair<torch::Tensor, torch::Tensor> RopeTables(const ModelConfig& config);

// Saves `module` (BuildLlamaModule's: model.yaml says `module: autouvm`) and the config's model.yaml (preceded
// by `yaml_comment`) as <repo_dir>/<config.name>/,
// through temporaries renamed at the end: an entry is never left half-written. A config with a
// chat_template_file (a name in the entry's directory) has chat_template written there, before model.yaml.
absl::Status WriteLlamaEntry(const ModelConfig& config, torch::jit::Module& module, const std::string& repo_dir,
                             const std::string& yaml_comment);

}  // namespace autouvm::engine
