#include "engine/model_config.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace autouvm::engine {

using base::ParseYamlDocument;
using base::ReadTextFile;
using base::YamlFields;

namespace {

absl::Status FieldError(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.name.empty()) return FieldError("name", "must not be empty");
  if (c.architecture != "llama") return FieldError("architecture", "only 'llama' is supported");
  if (c.vocab_size < 2) return FieldError("vocab_size", "must be at least 2");
  if (c.dim < 1) return FieldError("dim", "must be positive");
  if (c.n_layers < 1) return FieldError("n_layers", "must be positive");
  if (c.n_heads < 1) return FieldError("n_heads", "must be positive");
  if (c.dim % c.n_heads != 0) return FieldError("n_heads", "must divide dim");
  if (c.head_dim < 2 || c.head_dim % 2 != 0) return FieldError("head_dim", "must be even (rotary embedding)");
  if (c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0) {
    return FieldError("n_kv_heads", "must be positive and divide n_heads");
  }
  if (c.ffn_dim < 1) return FieldError("ffn_dim", "must be positive");
  if (c.rope_scaling != "none" && c.rope_scaling != "linear" && c.rope_scaling != "llama3") {
    return FieldError("rope_scaling", "must be none, linear or llama3");
  }
  if (c.rope_scaling != "none" && !(c.rope_scaling_factor >= 1.0)) {
    return FieldError("rope_scaling_factor", "must be at least 1");
  }
  if (c.rope_scaling == "llama3" && !(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
    return FieldError("rope_high_freq_factor", "must be above rope_low_freq_factor");
  }
  if (c.max_seq < 2) return FieldError("max_seq", "must be at least 2");
  if (c.dtype != "fp32" && c.dtype != "bf16" && c.dtype != "fp16") {
    return FieldError("dtype", "must be fp32, bf16 or fp16");
  }
  if (c.bos_id < -1 || c.bos_id >= c.vocab_size) return FieldError("bos_id", "outside the vocabulary");
  if (c.eos_id < -1 || c.eos_id >= c.vocab_size) return FieldError("eos_id", "outside the vocabulary");
  for (const int64_t id : c.extra_eos_ids) {
    if (id < 0 || id >= c.vocab_size)
      return FieldError("extra_eos_ids", absl::StrCat(id, " is outside the vocabulary"));
  }
  if (c.tokenizer != "byte" && c.tokenizer != "sentencepiece" && c.tokenizer != "bpe") {
    return FieldError("tokenizer", "must be byte, sentencepiece or bpe");
  }
  if (c.tokenizer == "byte" && c.vocab_size < tokenizer::kByteVocabMin) {
    return FieldError("vocab_size", absl::StrCat("the byte tokenizer needs at least ", tokenizer::kByteVocabMin));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& yaml_text, const std::string& origin) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseYamlDocument(yaml_text, origin));
  ModelConfig c;
  constexpr int64_t kBig = int64_t{1} << 40;
  YamlFields f(root, "");
  f.String("name", &c.name);
  f.String("architecture", &c.architecture);
  f.Int("vocab_size", &c.vocab_size, 2, kBig);
  f.Int("dim", &c.dim, 1, kBig);
  f.Int("n_layers", &c.n_layers, 1, 100000);
  f.Int("n_heads", &c.n_heads, 1, 100000);
  f.Int("n_kv_heads", &c.n_kv_heads, 1, 100000);
  f.Int("head_dim", &c.head_dim, 1, kBig);
  f.Int("ffn_dim", &c.ffn_dim, 1, kBig);
  f.Int("max_seq", &c.max_seq, 2, kBig);
  f.Double("rope_theta", &c.rope_theta, 1.0, 1e12);
  f.String("rope_scaling", &c.rope_scaling);
  f.Double("rope_scaling_factor", &c.rope_scaling_factor, 1.0, 1e6);
  f.Double("rope_low_freq_factor", &c.rope_low_freq_factor, 1e-6, 1e6);
  f.Double("rope_high_freq_factor", &c.rope_high_freq_factor, 1e-6, 1e6);
  f.Int("rope_original_max_seq", &c.rope_original_max_seq, 1, kBig);
  f.Bool("attention_bias", &c.attention_bias);
  f.Double("norm_eps", &c.norm_eps, 0.0, 1.0);
  f.String("dtype", &c.dtype);
  f.Int("bos_id", &c.bos_id, -1, kBig);
  f.Int("eos_id", &c.eos_id, -1, kBig);
  f.IntList("extra_eos_ids", &c.extra_eos_ids, 0, kBig);
  f.String("tokenizer", &c.tokenizer);
  f.Int("generated_weights_seed", &c.generated_weights_seed, 0, std::numeric_limits<int64_t>::max());
  if (absl::Status s = f.Finish(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  }
  if (c.head_dim == 0 && c.n_heads > 0) c.head_dim = c.dim / c.n_heads;
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the model's model.yaml"));
  return ParseModelConfig(text, path);
}

std::string ModelConfigToYaml(const ModelConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "architecture" << YAML::Value << c.architecture;
  out << YAML::Key << "vocab_size" << YAML::Value << c.vocab_size;
  out << YAML::Key << "dim" << YAML::Value << c.dim;
  out << YAML::Key << "n_layers" << YAML::Value << c.n_layers;
  out << YAML::Key << "n_heads" << YAML::Value << c.n_heads;
  out << YAML::Key << "n_kv_heads" << YAML::Value << c.n_kv_heads;
  out << YAML::Key << "head_dim" << YAML::Value << c.head_dim;
  out << YAML::Key << "ffn_dim" << YAML::Value << c.ffn_dim;
  out << YAML::Key << "max_seq" << YAML::Value << c.max_seq;
  out << YAML::Key << "rope_theta" << YAML::Value << c.rope_theta;
  if (c.rope_scaling != "none") {
    out << YAML::Key << "rope_scaling" << YAML::Value << c.rope_scaling;
    out << YAML::Key << "rope_scaling_factor" << YAML::Value << c.rope_scaling_factor;
    if (c.rope_scaling == "llama3") {
      out << YAML::Key << "rope_low_freq_factor" << YAML::Value << c.rope_low_freq_factor;
      out << YAML::Key << "rope_high_freq_factor" << YAML::Value << c.rope_high_freq_factor;
      out << YAML::Key << "rope_original_max_seq" << YAML::Value << c.rope_original_max_seq;
    }
  }
  if (c.attention_bias) out << YAML::Key << "attention_bias" << YAML::Value << true;
  out << YAML::Key << "norm_eps" << YAML::Value << c.norm_eps;
  out << YAML::Key << "dtype" << YAML::Value << c.dtype;
  out << YAML::Key << "bos_id" << YAML::Value << c.bos_id;
  out << YAML::Key << "eos_id" << YAML::Value << c.eos_id;
  if (!c.extra_eos_ids.empty()) out << YAML::Key << "extra_eos_ids" << YAML::Value << YAML::Flow << c.extra_eos_ids;
  out << YAML::Key << "tokenizer" << YAML::Value << c.tokenizer;
  if (c.generated_weights_seed != 0) {
    out << YAML::Key << "generated_weights_seed" << YAML::Value << c.generated_weights_seed;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

tokenizer::TokenizerSpec TokenizerSpecOf(const ModelConfig& config) {
  return {.kind = config.tokenizer, .vocab_size = config.vocab_size, .bos_id = config.bos_id, .eos_id = config.eos_id};
}

}  // namespace autouvm::engine
