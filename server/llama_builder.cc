#include "server/llama_builder.h"

#include <torch/script.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"
#include "server/generated_weights.h"
#include "server/torch_dtype.h"

namespace autouvm::server {
namespace {

// Note [Llama TorchScript layout]:
// One submodule per decoder layer ("layer0", "layer1", ...) so parameters have stable dotted names
// ("layer3.wq") that the runtime uses as tensor identities. The top module's forward is generated with
// the layer calls unrolled, since TorchScript cannot look attributes up by computed name. Two entry
// points share the layer code: forward (KV cache in slots, attention over the masked max_seq so that
// every decode step has the same shapes) and full (no cache, causal attention over the given tokens),
// which exists to check the cached path against. Grouped-query attention groups the query heads of each
// key/value head in one matmul instead of copying keys and values per query head.
constexpr const char* kLayerSource = R"JIT(
def rms(self, x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
    return y.to(x.dtype) * w

def rope(self, x, cos, sin):
    half = self.head_dim // 2
    x1 = x[:, :, :, :half]
    x2 = x[:, :, :, half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

def qkv(self, x, cos, sin):
    B = x.size(0)
    T = x.size(1)
    h = self.rms(x, self.attn_norm)
    q = torch.matmul(h, self.wq.t()).view(B, T, self.n_heads, self.head_dim)
    k = torch.matmul(h, self.wk.t()).view(B, T, self.n_kv_heads, self.head_dim)
    v = torch.matmul(h, self.wv.t()).view(B, T, self.n_kv_heads, self.head_dim)
    return self.rope(q, cos, sin), self.rope(k, cos, sin), v

def finish(self, x, q, keys, vals, mask):
    B = x.size(0)
    T = x.size(1)
    S = keys.size(2)
    rep = self.n_heads // self.n_kv_heads
    qh = q.transpose(1, 2).reshape(B, self.n_kv_heads, rep * T, self.head_dim)
    scores = torch.matmul(qh, keys.transpose(2, 3)).float() * self.scale
    scores = scores.view(B, self.n_kv_heads, rep, T, S) + mask.unsqueeze(1)
    probs = torch.softmax(scores, -1).to(qh.dtype).view(B, self.n_kv_heads, rep * T, S)
    o = torch.matmul(probs, vals).view(B, self.n_heads, T, self.head_dim)
    o = o.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
    x = x + torch.matmul(o, self.wo.t())
    h = self.rms(x, self.mlp_norm)
    g = torch.silu(torch.matmul(h, self.w_gate.t())) * torch.matmul(h, self.w_up.t())
    return x + torch.matmul(g, self.w_down.t())

def forward(self, x, cos, sin, mask, kc, vc, slots, slot_ix, pos_ix):
    q, k, v = self.qkv(x, cos, sin)
    kc[slot_ix, :, pos_ix] = k
    vc[slot_ix, :, pos_ix] = v
    return self.finish(x, q, kc.index_select(0, slots), vc.index_select(0, slots), mask)

def full(self, x, cos, sin, mask):
    q, k, v = self.qkv(x, cos, sin)
    return self.finish(x, q, k.transpose(1, 2), v.transpose(1, 2), mask)
)JIT";

std::string TopSource(int64_t n_layers) {
  std::string fwd_calls, full_calls;
  for (int64_t i = 0; i < n_layers; ++i) {
    absl::StrAppend(&fwd_calls, "    x = self.layer", i, ".forward(x, cos, sin, mask, k_cache[", i, "], v_cache[", i,
                    "], slots, slot_ix, pos)\n");
    absl::StrAppend(&full_calls, "    x = self.layer", i, ".full(x, cos, sin, mask)\n");
  }
  return absl::StrCat(R"JIT(
def rms(self, x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
    return y.to(x.dtype) * w

def head(self, x):
    return torch.matmul(self.rms(x, self.norm), self.lm_head.t()).float()

def forward(self, tokens, slots, start_pos, k_cache, v_cache):
    B = tokens.size(0)
    T = tokens.size(1)
    S = k_cache.size(3)
    pos = start_pos.unsqueeze(1) + torch.arange(T, device=tokens.device).unsqueeze(0)
    cos = self.rope_cos[pos].unsqueeze(2).to(self.tok_embeddings.dtype)
    sin = self.rope_sin[pos].unsqueeze(2).to(self.tok_embeddings.dtype)
    keypos = torch.arange(S, device=tokens.device).view(1, 1, 1, S)
    mask = torch.zeros([B, 1, T, S], device=tokens.device)
    mask = mask.masked_fill(keypos > pos.view(B, 1, T, 1), float("-inf"))
    slot_ix = slots.unsqueeze(1).expand(B, T)
    x = torch.embedding(self.tok_embeddings, tokens)
)JIT",
                      fwd_calls, R"JIT(    return self.head(x)

def full(self, tokens):
    T = tokens.size(1)
    pos = torch.arange(T, device=tokens.device).unsqueeze(0)
    cos = self.rope_cos[pos].unsqueeze(2).to(self.tok_embeddings.dtype)
    sin = self.rope_sin[pos].unsqueeze(2).to(self.tok_embeddings.dtype)
    keypos = torch.arange(T, device=tokens.device).view(1, 1, 1, T)
    mask = torch.zeros([1, 1, T, T], device=tokens.device)
    mask = mask.masked_fill(keypos > pos.view(1, 1, T, 1), float("-inf"))
    x = torch.embedding(self.tok_embeddings, tokens)
)JIT",
                      full_calls, "    return self.head(x)\n");
}

// A parameter of `shape` whose weights are generated at load (generated_weights_seed): one element
// broadcast, so model.pt stays small (server/generated_weights.h replaces it).
torch::Tensor Placeholder(std::vector<int64_t> shape, c10::ScalarType dtype) {
  return torch::zeros({1}, dtype).expand(shape);
}

void AddCommonAttributes(torch::jit::Module& m, const ModelConfig& c) {
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_attribute("eps", c10::FloatType::get(), c.norm_eps);
}

torch::jit::Module BuildLayer(const ModelConfig& c, c10::ScalarType dtype) {
  torch::jit::Module layer("LlamaLayer");
  AddCommonAttributes(layer, c);
  layer.register_attribute("n_heads", c10::IntType::get(), c.n_heads);
  layer.register_attribute("n_kv_heads", c10::IntType::get(), c.n_kv_heads);
  layer.register_attribute("head_dim", c10::IntType::get(), c.head_dim);
  layer.register_attribute("scale", c10::FloatType::get(), 1.0 / std::sqrt(double(c.head_dim)));
  auto linear = [&](int64_t out, int64_t in) {
    if (c.generated_weights_seed != 0) return Placeholder({out, in}, dtype);
    return (torch::randn({out, in}) / std::sqrt(double(in))).to(dtype);
  };
  auto norm = [&]() {
    if (c.generated_weights_seed != 0) return Placeholder({c.dim}, dtype);
    return (1.0 + 0.1 * torch::randn({c.dim})).to(dtype);
  };
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  layer.register_parameter("attn_norm", norm(), false);
  layer.register_parameter("wq", linear(q_dim, c.dim), false);
  layer.register_parameter("wk", linear(kv_dim, c.dim), false);
  layer.register_parameter("wv", linear(kv_dim, c.dim), false);
  layer.register_parameter("wo", linear(c.dim, q_dim), false);
  layer.register_parameter("mlp_norm", norm(), false);
  layer.register_parameter("w_gate", linear(c.ffn_dim, c.dim), false);
  layer.register_parameter("w_up", linear(c.ffn_dim, c.dim), false);
  layer.register_parameter("w_down", linear(c.dim, c.ffn_dim), false);
  layer.define(kLayerSource);
  return layer;
}

torch::jit::Module BuildModel(const ModelConfig& c, uint64_t seed) {
  std::lock_guard<std::mutex> lock(SeededRngMutex());  // libtorch's default generator is process-wide
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  const c10::ScalarType dtype = TorchDtype(c.dtype);
  torch::jit::Module m("LlamaForCausalLM");
  AddCommonAttributes(m, c);
  const bool generated = c.generated_weights_seed != 0;
  m.register_parameter(
      "tok_embeddings",
      generated ? Placeholder({c.vocab_size, c.dim}, dtype) : torch::randn({c.vocab_size, c.dim}).to(dtype), false);
  for (int64_t i = 0; i < c.n_layers; ++i) m.register_module(absl::StrCat("layer", i), BuildLayer(c, dtype));
  m.register_parameter("norm", generated ? Placeholder({c.dim}, dtype) : (1.0 + 0.1 * torch::randn({c.dim})).to(dtype),
                       false);
  m.register_parameter("lm_head",
                       generated ? Placeholder({c.vocab_size, c.dim}, dtype)
                                 : (torch::randn({c.vocab_size, c.dim}) / std::sqrt(double(c.dim))).to(dtype),
                       false);
  // Rotary tables in fp32, indexed by absolute position.
  const int64_t half = c.head_dim / 2;
  auto inv_freq = torch::pow(c.rope_theta, -torch::arange(0, half, torch::kDouble) / double(half));
  auto angles = torch::outer(torch::arange(c.max_seq, torch::kDouble), inv_freq).to(torch::kFloat);
  m.register_buffer("rope_cos", angles.cos().contiguous());
  m.register_buffer("rope_sin", angles.sin().contiguous());
  m.define(TopSource(c.n_layers));
  return m;
}

}  // namespace

absl::Status WriteLlamaModel(const ModelConfig& config, uint64_t seed, const std::string& repo_dir) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(repo_dir) / config.name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  try {
    torch::jit::Module m = BuildModel(config, seed);
    // Write to temporaries and rename, so a crash never leaves a half-written entry behind.
    m.save((dir / "model.pt.tmp").string());
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building the TorchScript model failed: ", e.what_without_backtrace()));
  }
  {
    std::ofstream out(dir / "model.yaml.tmp");
    out << "# Generated by autouvm-mkmodel (seed " << seed << "). See docs/model-contract.md.\n"
        << ModelConfigToYaml(config);
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", (dir / "model.yaml.tmp").string()));
  }
  fs::rename(dir / "model.pt.tmp", dir / "model.pt", ec);
  if (!ec) fs::rename(dir / "model.yaml.tmp", dir / "model.yaml", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot finish writing ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

ModelConfig DefaultTinyModelConfig(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = 320;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = c.dim / c.n_heads;
  c.ffn_dim = 688;
  c.max_seq = 512;
  c.dtype = "fp32";
  c.bos_id = kByteBosId;
  c.eos_id = kByteEosId;
  c.tokenizer = "byte";
  return c;
}

}  // namespace autouvm::server
