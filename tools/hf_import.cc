#include "tools/hf_import.h"

#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/llama_module.h"
#include "engine/torch_dtype.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tools/hf_chat_template.h"
#include "tools/json_file.h"
#include "tools/safetensors.h"

namespace autouvm::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

absl::Status Bad(const std::string& origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
}

// Typed reads of config.json's keys: the error names the file and the key.
class Keys {
 public:
  Keys(const json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return Bad(origin_, absl::StrCat(key, ": missing"));
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not an integer"));
    return v.get<int64_t>();
  }
  absl::StatusOr<double> Number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not a number"));
    return v.get<double>();
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not true or false"));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not a string"));
    return v.get<std::string>();
  }
  // An id or a list of ids (eos_token_id); empty when absent.
  absl::StatusOr<std::vector<int64_t>> Ids(const std::string& key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const json& v = j_.at(key);
    if (v.is_number_integer()) return std::vector<int64_t>{v.get<int64_t>()};
    if (!v.is_array()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not an id or a list of ids"));
    for (const json& e : v) {
      if (!e.is_number_integer()) return Bad(origin_, absl::StrCat(key, ": ", v.dump(), " is not a list of ids"));
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  absl::Status Refuse(const std::string& key, const std::string& why) const { return Bad(origin_, key + ": " + why); }

 private:
  const json& j_;
  std::string origin_;
};

// The rotary embedding: transformers 5 writes rope_parameters {rope_type, rope_theta, factor, ...};
// earlier versions rope_theta and rope_scaling {rope_type or type, factor, ...}.
absl::Status ReadRope(const json& config, const Keys& keys, engine::ModelConfig* c) {
  ASSIGN_OR_RETURN(c->rope_theta, keys.Number("rope_theta", 10000.0));
  const char* key = keys.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!keys.has(key)) return absl::OkStatus();
  const json& r = config.at(key);
  if (!r.is_object()) return keys.Refuse(key, absl::StrCat(r.dump(), " is not an object"));
  const Keys rk(r, absl::StrCat("config.json: ", key));
  ASSIGN_OR_RETURN(c->rope_theta, rk.Number("rope_theta", c->rope_theta));
  ASSIGN_OR_RETURN(std::string type, rk.String("rope_type", ""));
  if (type.empty()) {
    ASSIGN_OR_RETURN(type, rk.String("type", "default"));
  }
  if (type == "default") return absl::OkStatus();
  if (type != "linear" && type != "llama3") {
    return keys.Refuse(key, absl::StrCat("type \"", type,
                                         "\" is not supported (linear and llama3 are): the rotary tables would "
                                         "not be the ones the model was trained with"));
  }
  c->rope_scaling = type;
  ASSIGN_OR_RETURN(c->rope_scaling_factor, rk.Number("factor", 0));
  if (type == "llama3") {
    ASSIGN_OR_RETURN(c->rope_low_freq_factor, rk.Number("low_freq_factor", 1));
    ASSIGN_OR_RETURN(c->rope_high_freq_factor, rk.Number("high_freq_factor", 4));
    ASSIGN_OR_RETURN(c->rope_original_max_seq, rk.Int("original_max_position_embeddings", 8192));
  }
  return absl::OkStatus();
}

// A checkpoint tensor as a CPU tensor of `dtype` (a copy: the view's bytes live in the file's mapping).
absl::StatusOr<torch::Tensor> ToTensor(const TensorView& v, c10::ScalarType dtype) {
  c10::ScalarType source;
  if (v.dtype == "BF16") {
    source = torch::kBFloat16;
  } else if (v.dtype == "F16") {
    source = torch::kHalf;
  } else if (v.dtype == "F32") {
    source = torch::kFloat;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(v.name, ": dtype ", v.dtype,
                                                   " (weights are read in BF16, F16 or F32; quantized checkpoints "
                                                   "are not supported)"));
  }
  // Note [Weights stay in the file]: a tensor already in the entry's dtype is a view of the checkpoint's
  // read-only mapping, written from there into model.pt, so that converting holds in memory only what
  // changes dtype (a 13B or 70B checkpoint converts on a machine with less memory than the model). The
  // mapping outlives the module (ConvertHfModel), and nothing writes to a parameter before it is saved.
  const torch::Tensor in_file = torch::from_blob(const_cast<uint8_t*>(v.data), v.shape, torch::dtype(source));
  return source == dtype ? in_file : in_file.to(dtype);
}

}  // namespace

std::string HfTensorName(const std::string& parameter) {
  if (parameter == "tok_embeddings") return "model.embed_tokens.weight";
  if (parameter == "norm") return "model.norm.weight";
  if (parameter == "lm_head") return "lm_head.weight";
  const size_t dot = parameter.find('.');
  if (parameter.rfind("layer", 0) != 0 || dot == std::string::npos) return "";
  const std::string layer = absl::StrCat("model.layers.", parameter.substr(5, dot - 5), ".");
  const std::string p = parameter.substr(dot + 1);
  static const std::map<std::string, std::string> kInLayer = {{"attn_norm", "input_layernorm.weight"},
                                                              {"wq", "self_attn.q_proj.weight"},
                                                              {"bq", "self_attn.q_proj.bias"},
                                                              {"wk", "self_attn.k_proj.weight"},
                                                              {"bk", "self_attn.k_proj.bias"},
                                                              {"wv", "self_attn.v_proj.weight"},
                                                              {"bv", "self_attn.v_proj.bias"},
                                                              {"wo", "self_attn.o_proj.weight"},
                                                              {"mlp_norm", "post_attention_layernorm.weight"},
                                                              {"w_gate", "mlp.gate_proj.weight"},
                                                              {"w_up", "mlp.up_proj.weight"},
                                                              {"w_down", "mlp.down_proj.weight"}};
  auto it = kInLayer.find(p);
  return it == kInLayer.end() ? "" : layer + it->second;
}

absl::StatusOr<HfModel> ReadHfConfig(const std::string& dir, const HfImportOptions& options) {
  const fs::path root(dir);
  ASSIGN_OR_RETURN(const json config, ReadJsonObject((root / "config.json").string()));
  const Keys keys(config, (root / "config.json").string());
  HfModel m;
  engine::ModelConfig& c = m.config;
  c.name = options.name;
  // The family: what the architecture is, and what its config keys mean.
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    arch = config["architectures"][0].get<std::string>();
  }
  ASSIGN_OR_RETURN(const std::string model_type, keys.String("model_type", ""));
  if (arch == "LlamaForCausalLM" || (arch.empty() && model_type == "llama")) {
    m.family = "llama";
  } else if (arch == "MistralForCausalLM" || (arch.empty() && model_type == "mistral")) {
    m.family = "mistral";
  } else if (arch == "Qwen2ForCausalLM" || (arch.empty() && model_type == "qwen2")) {
    m.family = "qwen2";
  } else {
    return keys.Refuse("architectures",
                       absl::StrCat("\"", arch.empty() ? model_type : arch,
                                    "\" is not a Llama-family model (LlamaForCausalLM, MistralForCausalLM, "
                                    "Qwen2ForCausalLM)"));
  }
  ASSIGN_OR_RETURN(c.dim, keys.Int("hidden_size"));
  ASSIGN_OR_RETURN(c.n_layers, keys.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.n_heads, keys.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(c.n_kv_heads, keys.Int("num_key_value_heads", c.n_heads));
  if (c.n_heads <= 0 || c.dim <= 0) return keys.Refuse("num_attention_heads", "must be positive, as hidden_size");
  ASSIGN_OR_RETURN(c.head_dim, keys.Int("head_dim", c.dim / c.n_heads));
  ASSIGN_OR_RETURN(c.ffn_dim, keys.Int("intermediate_size"));
  ASSIGN_OR_RETURN(c.vocab_size, keys.Int("vocab_size"));
  ASSIGN_OR_RETURN(const int64_t max_positions, keys.Int("max_position_embeddings", 4096));
  ASSIGN_OR_RETURN(c.norm_eps, keys.Number("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(m.tied_embeddings, keys.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const std::string act, keys.String("hidden_act", "silu"));
  if (act != "silu") return keys.Refuse("hidden_act", absl::StrCat("\"", act, "\": only silu (SwiGLU) is supported"));
  ASSIGN_OR_RETURN(const bool mlp_bias, keys.Bool("mlp_bias", false));
  if (mlp_bias) return keys.Refuse("mlp_bias", "biases on the MLP projections are not supported");
  // Qwen2's query, key and value projections always have biases; Llama's when attention_bias says so
  // (then its output projection has one too, which the module has no place for).
  if (m.family == "qwen2") {
    c.attention_bias = true;
  } else {
    ASSIGN_OR_RETURN(const bool bias, keys.Bool("attention_bias", false));
    if (bias) return keys.Refuse("attention_bias", "a bias on the output projection is not supported");
  }
  RETURN_IF_ERROR(ReadRope(config, keys, &c));
  c.max_seq = options.max_seq > 0 ? options.max_seq : std::min<int64_t>(max_positions, 4096);
  if (c.max_seq > max_positions) {
    return keys.Refuse("max_position_embeddings", absl::StrCat(max_positions, " positions: max_seq ", c.max_seq,
                                                               " is past what the model was trained for"));
  }
  // A sliding window shorter than the cache would have the model attend where it was trained not to.
  bool windowed = m.family == "mistral";
  if (m.family == "qwen2") {
    ASSIGN_OR_RETURN(windowed, keys.Bool("use_sliding_window", false));
  }
  if (windowed && keys.has("sliding_window")) {
    ASSIGN_OR_RETURN(const int64_t window, keys.Int("sliding_window"));
    if (window < c.max_seq) {
      return keys.Refuse("sliding_window", absl::StrCat(window, " positions, less than max_seq ", c.max_seq,
                                                        ": convert with a max_seq of at most ", window));
    }
  }
  // dtype: asked for, else the checkpoint's.
  if (!options.dtype.empty()) {
    c.dtype = options.dtype;
  } else {
    // transformers writes "dtype" since 4.56 (and 5), "torch_dtype" before.
    const std::string key = keys.has("dtype") ? "dtype" : "torch_dtype";
    ASSIGN_OR_RETURN(const std::string td, keys.String(key, "float32"));
    if (td == "bfloat16") {
      c.dtype = "bf16";
    } else if (td == "float16") {
      c.dtype = "fp16";
    } else if (td == "float32") {
      c.dtype = "fp32";
    } else {
      return keys.Refuse(key, absl::StrCat("\"", td, "\": give the dtype to convert to (fp32, bf16, fp16)"));
    }
  }
  // bos and eos: generation_config.json says what generation uses; config.json otherwise.
  ASSIGN_OR_RETURN(std::vector<int64_t> bos, keys.Ids("bos_token_id"));
  ASSIGN_OR_RETURN(m.eos_ids, keys.Ids("eos_token_id"));
  std::error_code ec;
  if (fs::exists(root / "generation_config.json", ec)) {
    ASSIGN_OR_RETURN(const json gen, ReadJsonObject((root / "generation_config.json").string()));
    const Keys gk(gen, (root / "generation_config.json").string());
    ASSIGN_OR_RETURN(std::vector<int64_t> gen_bos, gk.Ids("bos_token_id"));
    ASSIGN_OR_RETURN(std::vector<int64_t> gen_eos, gk.Ids("eos_token_id"));
    if (!gen_bos.empty()) bos = gen_bos;
    if (!gen_eos.empty()) m.eos_ids = gen_eos;
  }
  c.bos_id = bos.empty() ? -1 : bos.front();
  c.eos_id = m.eos_ids.empty() ? -1 : m.eos_ids.front();
  if (m.eos_ids.size() > 1) c.extra_eos_ids.assign(m.eos_ids.begin() + 1, m.eos_ids.end());
  // The tokenizer: tokenizer.json where there is one, as transformers loads it (byte-level BPE: Llama 3,
  // Qwen2; sentencepiece's kind: Llama 2, Mistral), its own template saying whether a prompt starts with
  // a bos; else sentencepiece's tokenizer.model. A tokenizer.json we cannot serve falls back to a
  // tokenizer.model beside it, with a note of what differs.
  const fs::path json_file = root / "tokenizer.json", sp_file = root / "tokenizer.model";
  absl::Status json_refused = absl::OkStatus();
  if (fs::exists(json_file, ec)) {
    auto bpe = tokenizer::BpeTokenizer::Load(json_file.string());
    if (bpe.ok() && (*bpe)->vocab_size() > c.vocab_size) {
      return Bad(json_file.string(), absl::StrCat("ids up to ", (*bpe)->vocab_size() - 1,
                                                  ", past config.json's vocab_size ", c.vocab_size));
    }
    if (bpe.ok()) {
      c.tokenizer = "bpe";
      c.bos_id = (*bpe)->template_bos_id();
      m.tokenizer_file = json_file.string();
    } else if (!fs::exists(sp_file, ec)) {
      return bpe.status();
    } else {
      json_refused = bpe.status();
    }
  }
  if (m.tokenizer_file.empty() && fs::exists(sp_file, ec)) {
    c.tokenizer = "sentencepiece";
    m.tokenizer_file = sp_file.string();
    if (!json_refused.ok()) {
      m.tokenizer_note = absl::StrCat(
          "tokenizer.json is not served (", json_refused.message(),
          "); tokenizer.model is, which encodes text at the start and around special tokens as sentencepiece "
          "does, not always as transformers does");
    }
  } else if (m.tokenizer_file.empty() && options.byte_tokenizer) {
    c.tokenizer = "byte";
  } else if (m.tokenizer_file.empty()) {
    return Bad(dir, "no tokenizer.json or tokenizer.model to serve the model with");
  }
  if (options.chat_template) {
    absl::StatusOr<HfChatTemplate> t = ReadHfChatTemplate(dir);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat(t.status().message(), " (autouvm-convert --no-chat-template leaves it out)"));
    }
    c.chat_template = t->source;
    if (!c.chat_template.empty()) c.chat_template_file = "chat_template.jinja";
    c.bos_token = t->bos_token;
    c.eos_token = t->eos_token;
    m.chat_template_note = t->note;
  }
  if (absl::Status s = engine::ValidateModelConfig(c); !s.ok()) {
    return Bad((root / "config.json").string(), absl::StrCat("gives a model the contract refuses: ", s.message()));
  }
  return m;
}

absl::StatusOr<HfModel> ConvertHfModel(const std::string& dir, const std::string& repo_dir,
                                       const HfImportOptions& options) {
  if (options.name.empty() || options.name.find('/') != std::string::npos || options.name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("name: \"", options.name, "\" cannot be an entry's directory"));
  }
  const fs::path entry = fs::path(repo_dir) / options.name;
  std::error_code ec;
  if (fs::exists(entry, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(entry.string(), " exists: remove it or choose another name"));
  }
  ASSIGN_OR_RETURN(HfModel m, ReadHfConfig(dir, options));
  ASSIGN_OR_RETURN(const std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(dir));
  const c10::ScalarType dtype = engine::TorchDtype(m.config.dtype);
  std::set<std::string> used;
  auto parameter = [&](const std::string& name, const std::vector<int64_t>& shape) -> absl::StatusOr<torch::Tensor> {
    std::string hf = HfTensorName(name);
    if (name == "lm_head" && m.tied_embeddings) {
      if (ckpt->has(hf)) used.insert(hf);  // saved beside the embedding, which it is
      hf = HfTensorName("tok_embeddings");
    }
    if (!ckpt->has(hf)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": the checkpoint has no ", hf,
                       name == "lm_head" ? " (and config.json's tie_word_embeddings is false)" : ""));
    }
    ASSIGN_OR_RETURN(const TensorView v, ckpt->View(hf));
    if (v.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": ", hf, " has shape [", absl::StrJoin(v.shape, ", "),
                                                     "], config.json's dimensions give [", absl::StrJoin(shape, ", "),
                                                     "]"));
    }
    used.insert(hf);
    return ToTensor(v, dtype);
  };
  ASSIGN_OR_RETURN(torch::jit::Module module, engine::BuildLlamaModule(m.config, parameter));
  // What the module has no place for is a model this converter does not understand.
  std::vector<std::string> unused;
  for (const std::string& n : ckpt->names()) {
    const bool rotary_cache = absl::EndsWith(n, "rotary_emb.inv_freq");  // older checkpoints' cached table
    if (!used.count(n) && !rotary_cache) unused.push_back(n);
  }
  if (!unused.empty()) {
    if (unused.size() > 5) unused.resize(5);
    return absl::InvalidArgumentError(absl::StrCat(dir, ": the checkpoint holds tensors the ", m.family,
                                                   " module has no place for: ", absl::StrJoin(unused, ", "),
                                                   ": not a model this converter understands"));
  }
  absl::Status written = engine::WriteLlamaEntry(
      m.config, module, repo_dir,
      absl::StrCat("# Converted by autouvm-convert from ", fs::absolute(dir, ec).string(), " (", m.family,
                   m.tied_embeddings ? ", LM head tied to the embedding" : "",
                   m.eos_ids.size() > 1 ? absl::StrCat(", end-of-sequence ids ", absl::StrJoin(m.eos_ids, ", ")) : "",
                   "). See docs/model-contract.md.\n"));
  if (!written.ok()) {
    fs::remove_all(entry, ec);
    return written;
  }
  if (!m.tokenizer_file.empty()) {
    fs::copy_file(m.tokenizer_file, entry / fs::path(m.tokenizer_file).filename(), ec);
    if (ec) {
      fs::remove_all(entry, ec);
      return absl::InternalError(absl::StrCat("cannot copy ", m.tokenizer_file, " into ", entry.string()));
    }
  }
  return m;
}

}  // namespace autouvm::tools
