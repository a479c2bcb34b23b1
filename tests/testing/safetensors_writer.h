// Writes safetensors files for the tests of tools/safetensors.h and tools/hf_import.h: whole tensors,
// or a header and data of the test's choosing (malformed files); and names parameters and writes
// config.json as Hugging Face checkpoints do.
//
//   WriteSafetensors(dir.Sub("model.safetensors"), {{"model.norm.weight", torch::ones({64})}});
//
// Not thread-safe (writes files).
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/model_config.h"

namespace autouvm::testing {

// An 8-byte little-endian header length, the header, then `data`.
inline void WriteRawSafetensors(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
}

inline const char* SafetensorsDtypeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kBFloat16:
      return "BF16";
    case torch::kHalf:
      return "F16";
    case torch::kFloat:
      return "F32";
    case torch::kLong:
      return "I64";
    default:
      return "?";
  }
}

// The tensors back to back in the given order, with an optional __metadata__.
inline void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                             const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.contiguous().cpu();
    const auto begin = data.size();
    data.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    header[name] = {
        {"dtype", SafetensorsDtypeOf(t)}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  WriteRawSafetensors(path, header.dump(), data);
}

// Where save_pretrained puts each of the module's parameters (engine/llama_module.h), written out here
// independently of tools/hf_import.h's HfTensorName: a wrong mapping there must not be matched by the
// same mistake in a test's checkpoint.
inline std::string HfCheckpointName(const std::string& parameter) {
  if (parameter == "tok_embeddings") return "model.embed_tokens.weight";
  if (parameter == "norm") return "model.norm.weight";
  if (parameter == "lm_head") return "lm_head.weight";
  const size_t dot = parameter.find('.');
  const std::string layer = "model.layers." + parameter.substr(5, dot - 5) + ".", p = parameter.substr(dot + 1);
  if (p == "attn_norm") return layer + "input_layernorm.weight";
  if (p == "mlp_norm") return layer + "post_attention_layernorm.weight";
  if (p == "w_gate") return layer + "mlp.gate_proj.weight";
  if (p == "w_up") return layer + "mlp.up_proj.weight";
  if (p == "w_down") return layer + "mlp.down_proj.weight";
  const std::string proj = std::string(1, p[1]) + "_proj";  // wq -> q_proj, bk -> k_proj
  return layer + "self_attn." + proj + (p[0] == 'w' ? ".weight" : ".bias");
}

// config.json as save_pretrained writes it for `c` (transformers before 5: rope_theta at the top).
inline nlohmann::json HfConfigJson(const engine::ModelConfig& c, const std::string& architecture,
                                   const std::string& model_type, bool tied) {
  nlohmann::json j = {{"architectures", {architecture}},
                      {"model_type", model_type},
                      {"hidden_size", c.dim},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"intermediate_size", c.ffn_dim},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_seq},
                      {"rope_theta", c.rope_theta},
                      {"rms_norm_eps", c.norm_eps},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", tied},
                      {"torch_dtype", c.dtype == "bf16"   ? "bfloat16"
                                      : c.dtype == "fp16" ? "float16"
                                                          : "float32"},
                      {"bos_token_id", c.bos_id},
                      {"eos_token_id", c.eos_id}};
  if (model_type == "mistral") j["sliding_window"] = 4096;
  if (model_type == "qwen2") j["use_sliding_window"] = false;
  return j;
}

}  // namespace autouvm::testing
