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
  // The chat template (Jinja source, tokenizer/chat_template.h) that turns a conversation into a prompt; ""
  // when the model has none. model.yaml gives it inline (`chat_template:`) or as a file beside it
  // (`chat_template_file:`, read by ParseModelConfig relative to model.yaml).
  std::string chat_template;
  // The file chat_template was read from, as model.yaml names it; "" when inline. ModelConfigToYaml writes
  // this key in place of the source, and WriteLlamaEntry (engine/llama_module.h) writes the file.
  std::string chat_template_file;
  // The texts the template sees as bos_token and eos_token; "": the tokenizer's text of bos_id / eos_id,
  // taken when the model loads.
  std::string bos_token;
  std::string eos_token;
  // Not 0: model.pt holds placeholders and the weights are generated at load time from this seed
  // (engine/generated_weights.h), so that a benchmark's 13 GB model needs no 13 GB file.
  int64_t generated_weights_seed = 0;
  // "autouvm": model.pt is autouvm's own Llama module (engine/llama_module.h), written by autouvm-mkmodel or
  // autouvm-convert, so the daemon may run its weights with the module's code rebuilt for the libtorch it runs
  // on (Note [Layer kernels], engine/llama_module.cc). "": a module of the user's, run as saved.
  std::string module;
};

// A ChatML-style chat template: "<|im_start|>{role}\n{content}<|im_end|>\n" per message (a content that is a
// list of parts gives its text parts), and "<|im_start|>assistant\n" for add_generation_prompt: what
// autouvm-mkmodel and the daemon's default model carry, so that a first chat call works. With the byte
// tokenizer the markers are only text.
extern const char kDefaultChatTemplate[];

// Checks every field's range and the relations between them; the error names the field.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Parses model.yaml text; `origin` (its path) prefixes error messages, and a chat_template_file is read
// relative to its directory.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& yaml_text, const std::string& origin);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

std::string ModelConfigToYaml(const ModelConfig& config);

// The tokenizer the entry names, with the ids it must fit (tokenizer::CreateTokenizer).
tokenizer::TokenizerSpec TokenizerSpecOf(const ModelConfig& config);

}  // namespace autouvm::engine
