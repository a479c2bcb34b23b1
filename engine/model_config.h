// The model repository contract: what <repo>/<name>/model.yaml says about a model.
// docs/model-contract.md describes the file and the TorchScript signature it goes with.
//
// Plain value types and pure functions; safe to use from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::engine {

struct ModelConfig {
  std::string name;
  std::string architecture = "llama";
  int64_t vocab_size = 0;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // per head; dim / n_heads unless the checkpoint says otherwise
  int64_t ffn_dim = 0;
  int64_t max_seq = 0;
  double rope_theta = 10000.0;
  // Rotary frequencies stretched for long contexts, as the checkpoint was trained: "none"; "linear"
  // (every frequency / factor); "llama3" (Llama 3.1's: wavelengths past original_max_seq / low_freq_factor
  // divided by factor, those under original_max_seq / high_freq_factor kept, a blend between).
  std::string rope_scaling = "none";
  double rope_scaling_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_seq = 8192;
  // Biases on the query, key and value projections (Qwen2).
  bool attention_bias = false;
  double norm_eps = 1e-5;
  std::string dtype = "fp32";  // fp32 | bf16 | fp16
  int64_t bos_id = -1;         // -1: none
  int64_t eos_id = -1;
  // More ids that end a sequence as eos_id does (Llama 3 Instruct's <|eot_id|> beside <|end_of_text|>).
  std::vector<int64_t> extra_eos_ids;
  // byte | sentencepiece (tokenizer.model beside model.yaml) | bpe (a byte-level BPE tokenizer.json)
  std::string tokenizer = "byte";
  // Not 0: model.pt holds placeholders and the weights are generated at load time from this seed
  // (engine/generated_weights.h), so that a benchmark's 13 GB model needs no 13 GB file.
  int64_t generated_weights_seed = 0;
};

// Checks every field's range and the relations between them; the error names the field.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Parses model.yaml text; `origin` (a path) prefixes error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& yaml_text, const std::string& origin);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

std::string ModelConfigToYaml(const ModelConfig& config);

// The tokenizer the entry names, with the ids it must fit (tokenizer::CreateTokenizer).
tokenizer::TokenizerSpec TokenizerSpecOf(const ModelConfig& config);

}  // namespace autouvm::engine
