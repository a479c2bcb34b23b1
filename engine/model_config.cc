#include "engine/model_config.h"

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string_view>

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

constexpr uintmax_t kMaxChatTemplateBytes = uintmax_t{4} << 20;  // chat templates are a few kilobytes

// chat_template_file's source, read relative to model.yaml's directory: a regular file (not a FIFO or a
// device that never ends) of at most kMaxChatTemplateBytes.
absl::Status ReadChatTemplateFile(const std::string& origin, ModelConfig* c) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(origin).parent_path() / c->chat_template_file;
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    return FieldError("chat_template_file", absl::StrCat(path.string(), " is not a regular file"));
  }
  if (const uintmax_t size = fs::file_size(path, ec); !ec && size > kMaxChatTemplateBytes) {
    return FieldError(
        "chat_template_file",
        absl::StrCat(path.string(), " holds ", size, " bytes, more than a chat template's ", kMaxChatTemplateBytes));
  }
  absl::StatusOr<std::string> text = ReadTextFile(path.string(), "the model's chat template");
  if (!text.ok()) return FieldError("chat_template_file", std::string(text.status().message()));
  c->chat_template = *std::move(text);
  return absl::OkStatus();
}

// Whether `s` is well-formed UTF-8 (a template is text: Jinja reads it as a Python str).
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Note [Chat templates in model.yaml]: a template is written as a literal block ("chat_template: |"), as a
// person would write it, where that reads back as the same text: a block read back ends in exactly one
// newline, and yaml-cpp quotes what a block cannot hold. Otherwise (no final newline, two, ...) it is
// double-quoted with escapes, which reads back byte for byte.
void EmitChatTemplate(const std::string& source, YAML::Emitter* out) {
  YAML::Emitter literal;
  literal << YAML::BeginMap << YAML::Key << "chat_template" << YAML::Value << YAML::Literal << source << YAML::Key
          << "next" << YAML::Value << 0 << YAML::EndMap;  // as the key is followed in model.yaml
  bool same = false;
  try {
    same = YAML::Load(literal.c_str())["chat_template"].as<std::string>() == source;
  } catch (const YAML::Exception&) {
  }
  *out << YAML::Key << "chat_template" << YAML::Value << (same ? YAML::Literal : YAML::DoubleQuoted) << source;
}

}  // namespace

const char kDefaultChatTemplate[] =
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}\n"
    "{%- if message['content'] is string %}\n"
    "{{- message['content'] }}\n"
    "{%- elif message['content'] is iterable %}\n"
    "{%- for part in message['content'] if part['type'] == 'text' %}{{ part['text'] }}{% endfor %}\n"
    "{%- endif %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

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
  if (!c.module.empty() && c.module != "autouvm") {
    return FieldError("module", "must be autouvm (autouvm's own Llama module) or absent (a module of your own)");
  }
  if (c.tokenizer != "byte" && c.tokenizer != "sentencepiece" && c.tokenizer != "bpe") {
    return FieldError("tokenizer", "must be byte, sentencepiece or bpe");
  }
  if (!IsUtf8(c.chat_template)) return FieldError("chat_template", "not valid UTF-8");
  if (!IsUtf8(c.bos_token)) return FieldError("bos_token", "not valid UTF-8");
  if (!IsUtf8(c.eos_token)) return FieldError("eos_token", "not valid UTF-8");
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
  f.String("chat_template", &c.chat_template);
  f.String("chat_template_file", &c.chat_template_file);
  f.String("bos_token", &c.bos_token);
  f.String("eos_token", &c.eos_token);
  f.Int("generated_weights_seed", &c.generated_weights_seed, 0, std::numeric_limits<int64_t>::max());
  f.String("module", &c.module);
  if (absl::Status s = f.Finish(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  }
  if (!c.chat_template.empty() && !c.chat_template_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": chat_template and chat_template_file: both given; give the template one way"));
  }
  if (!c.chat_template_file.empty()) {
    if (absl::Status s = ReadChatTemplateFile(origin, &c); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
    }
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
  if (!c.bos_token.empty()) out << YAML::Key << "bos_token" << YAML::Value << YAML::DoubleQuoted << c.bos_token;
  if (!c.eos_token.empty()) out << YAML::Key << "eos_token" << YAML::Value << YAML::DoubleQuoted << c.eos_token;
  if (!c.chat_template_file.empty()) {
    out << YAML::Key << "chat_template_file" << YAML::Value << c.chat_template_file;
  } else if (!c.chat_template.empty()) {
    EmitChatTemplate(c.chat_template, &out);  // Note [Chat templates in model.yaml]
  }
  if (c.generated_weights_seed != 0) {
    out << YAML::Key << "generated_weights_seed" << YAML::Value << c.generated_weights_seed;
  }
  if (!c.module.empty()) out << YAML::Key << "module" << YAML::Value << c.module;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

tokenizer::TokenizerSpec TokenizerSpecOf(const ModelConfig& config) {
  return {.kind = config.tokenizer, .vocab_size = config.vocab_size, .bos_id = config.bos_id, .eos_id = config.eos_id};
}

}  // namespace autouvm::engine
