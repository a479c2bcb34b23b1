// Importing Hugging Face Llama-family checkpoints (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM) into the model contract (docs/model-contract.md): config.json (and
// generation_config.json) become model.yaml, the safetensors weights (tools/safetensors.h) the
// parameters of the TorchScript Llama module (engine/llama_module.h), and the tokenizer is carried over:
// tokenizer.json (tokenizer/bpe_tokenizer.h; byte-level or sentencepiece's kind) as transformers prefers it,
// else sentencepiece's tokenizer.model; so is the chat template (tools/hf_chat_template.h), written as
// chat_template.jinja beside model.yaml, with the bos and eos texts it sees.
//
//   ASSIGN_OR_RETURN(HfModel m, ReadHfConfig(hf_dir, {.name = "llama-2-7b"}));
//   ASSIGN_OR_RETURN(HfModel written, ConvertHfModel(hf_dir, repo_dir, {.name = "llama-2-7b", .max_seq = 4096}));
//
// What the architecture does that the module cannot (a sliding window shorter than max_seq, rope
// scaling other than linear and llama3, biases on other projections, an activation other than SiLU)
// is refused naming the config key, never converted into a model that computes something else. So is a
// checkpoint that lacks a tensor, holds one of the wrong shape, or holds one the module has no place for.
//
// Thread-safety: pure functions of their arguments and the files they read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_config.h"

namespace autouvm::tools {

struct HfImportOptions {
  std::string name;     // the entry's name (its directory in the repository)
  int64_t max_seq = 0;  // KV-cache positions; 0: max_position_embeddings, at most 4096
  std::string dtype;    // fp32 | bf16 | fp16; "": the checkpoint's torch_dtype
  // Without a tokenizer file the entry gets the byte tokenizer (tests, diagnostics); otherwise a
  // checkpoint without one is refused.
  bool byte_tokenizer = false;
  // The checkpoint's chat template (tools/hf_chat_template.h) goes into the entry as chat_template.jinja;
  // false leaves it out.
  bool chat_template = true;
};

struct HfModel {
  engine::ModelConfig config;    // model.yaml
  std::string family;            // llama | mistral | qwen2
  bool tied_embeddings = false;  // the LM head is the embedding (no lm_head.weight in the checkpoint)
  // Every end-of-sequence id the checkpoint names (config.eos_id the first, extra_eos_ids the others).
  std::vector<int64_t> eos_ids;
  std::string tokenizer_file;      // tokenizer.model or tokenizer.json to copy, or "" (byte tokenizer)
  std::string tokenizer_note;      // why tokenizer.json was passed over for tokenizer.model, or ""
  std::string chat_template_note;  // which chat template was taken where there was a choice, or ""
};

// Reads <dir>/config.json (and generation_config.json, for bos and eos; tokenizer_config.json and
// chat_template.jinja, for the chat template) into a model.yaml config.
// INVALID_ARGUMENT naming the file and key for anything missing, malformed or unsupported.
absl::StatusOr<HfModel> ReadHfConfig(const std::string& dir, const HfImportOptions& options);

// The checkpoint tensor that holds a module parameter ("layer3.wq" -> "model.layers.3.self_attn.q_proj.weight").
std::string HfTensorName(const std::string& parameter);

// Writes <repo_dir>/<options.name>/ (model.pt, model.yaml, the tokenizer file and chat_template.jinja when
// there are ones) from the
// checkpoint in `dir` and says what it wrote (ReadHfConfig's reading); nothing is left behind in the
// repository on failure.
absl::StatusOr<HfModel> ConvertHfModel(const std::string& dir, const std::string& repo_dir,
                                       const HfImportOptions& options);

}  // namespace autouvm::tools
