#include "engine/llama_module.h"

#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/layer_ops.h"
#include "engine/torch_dtype.h"
#include "torch/version.h"

namespace autouvm::engine {
namespace {

// Note [Llama TorchScript layout]:
// One submodule per decoder layer ("layer0", "layer1", ...) so parameters have stable dotted names
// ("layer3.wq") that the runtime uses as tensor identities. The top module's forward is generated with
// the layer calls unrolled, since TorchScript cannot look attributes up by computed name. Three entry
// points share the layer code: step (the daemon's: packed tokens, below), forward (the earlier contract's
// [B, T] form, kept for the tests and tools that drive a module directly) and full (no cache, causal
// attention over the given tokens), which exists to check the cached paths against. Grouped-query
// attention groups the query heads of each key/value head in one matmul instead of copying keys and
// values per query head.
//
// Note [Packed steps]: step's tokens are one packed row [N], each with its position and the KV-cache
// pool row it is written to (kv_rows; Note [Block KV cache], engine/kv_blocks.cc); the projections and the
// MLP run over all N at once (one weight sweep for every token of the pass), and attention runs in two
// groups: the decode group (the first nd tokens, one per generating sequence, each a query of its own)
// and the prompt group (prompt chunks, laid out [rows, longest chunk] through p_index; a padding entry
// repeats its row's last token and its output is dropped: p_flat picks each real token's output back
// out). Each group's sequences have their pool rows in d_rows / p_rows, position by position up to the
// group's span (the longest live sequence in it; a shorter one pads with the null block's row 0), and
// attention gathers the keys and values of those rows only, masked past each query's own position. The
// pool is read and written only below `live` (one past the highest row in use), through a view of those
// rows, so that a trace reaches only them (Note [KV pools by their live rows], runtime/access_trace.cc). The LM head
// runs only at logit_ix. A group that is empty skips its attention, so the ops of a step depend on which groups it has:
// its phase (decode, prefill, mixed) — and on nothing else: the gathered keys and values are copied to
// contiguous [rows, kv heads, span, head dim] always (into a new tensor: `contiguous` copies only what is
// not contiguous already, and a span of 1 is), where aten::matmul copied them itself for two rows or more and not
// for one, so a decode step of one sequence ran other ops than one of two and could not follow its plan
// (Note [Planned from the nearest profile], profiler/model_session.cc). Likewise the queries are made
// contiguous before they are grouped by key/value head: with one key/value head per query head
// (Llama-2-7B) the grouping is the transposed view itself, which aten::matmul folds for one row and
// copies inside itself for several, so a prefill of 16 prompts could not follow the plan of one (on the
// H200: "op 49 is aten::copy_#9, the plan expected aten::bmm#0"). Made contiguous, it is copied for every
// number of rows when a row has more than one token, and never for a decode group's single tokens.
constexpr const char* kLayerSource = R"JIT(
def rms(self, x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
    return y.to(x.dtype) * w

def rope(self, x, cos, sin):
    half = self.head_dim // 2
    return x * cos + torch.cat([x[:, :, :, half:], x[:, :, :, :half]], dim=-1) * sin

def qkv(self, x, cos, sin):
    B = x.size(0)
    T = x.size(1)
    h = self.rms(x, self.attn_norm)
    q = torch.matmul(h, self.wq.t()).view(B, T, self.n_heads, self.head_dim)
    k = torch.matmul(h, self.wk.t()).view(B, T, self.n_kv_heads, self.head_dim)
    v = torch.matmul(h, self.wv.t()).view(B, T, self.n_kv_heads, self.head_dim)
    return self.rope(q, cos, sin), self.rope(k, cos, sin), v

def attend(self, q, keys, vals, mask):
    B = q.size(0)
    T = q.size(1)
    S = keys.size(2)
    rep = self.n_heads // self.n_kv_heads
    qh = q.transpose(1, 2).contiguous().reshape(B, self.n_kv_heads, rep * T, self.head_dim)
    scores = torch.matmul(qh, keys.transpose(2, 3)).float() * self.scale
    scores = scores.view(B, self.n_kv_heads, rep, T, S) + mask.unsqueeze(1)
    probs = torch.softmax(scores, -1).to(qh.dtype).view(B, self.n_kv_heads, rep * T, S)
    o = torch.matmul(probs, vals).view(B, self.n_heads, T, self.head_dim)
    return o.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)

def mlp(self, x, o):
    x = x + torch.matmul(o, self.wo.t())
    h = self.rms(x, self.mlp_norm)
    g = torch.silu(torch.matmul(h, self.w_gate.t())) * torch.matmul(h, self.w_up.t())
    return x + torch.matmul(g, self.w_down.t())

def finish(self, x, q, keys, vals, mask):
    return self.mlp(x, self.attend(q, keys, vals, mask))

def forward(self, x, cos, sin, mask, kc, vc, slots, slot_ix, pos_ix):
    q, k, v = self.qkv(x, cos, sin)
    kc[slot_ix, :, pos_ix] = k
    vc[slot_ix, :, pos_ix] = v
    return self.finish(x, q, kc.index_select(0, slots), vc.index_select(0, slots), mask)

def full(self, x, cos, sin, mask):
    q, k, v = self.qkv(x, cos, sin)
    return self.finish(x, q, k.transpose(1, 2), v.transpose(1, 2), mask)

def gather(self, pool, rows):
    R = rows.size(0)
    S = rows.size(1)
    g = pool.index_select(0, rows.view(-1)).view(R, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
    return torch.empty([R, self.n_kv_heads, S, self.head_dim], dtype=pool.dtype, device=pool.device).copy_(g)

def step(self, x, cos, sin, kc, vc, kv_rows, live: int, d_rows, d_mask, p_index, p_flat, p_rows, p_mask):
    q, k, v = self.qkv(x, cos, sin)
    kl = kc.narrow(0, 0, live)
    vl = vc.narrow(0, 0, live)
    kl[kv_rows] = k[0]
    vl[kv_rows] = v[0]
    q = q[0]
    nd = d_rows.size(0)
    parts: List[Tensor] = []
    if nd > 0:
        o = self.attend(q[:nd].unsqueeze(1), self.gather(kl, d_rows), self.gather(vl, d_rows), d_mask)
        parts.append(o.squeeze(1))
    if p_index.size(0) > 0:
        o = self.attend(q[p_index], self.gather(kl, p_rows), self.gather(vl, p_rows), p_mask)
        parts.append(o.view(-1, o.size(2)).index_select(0, p_flat))
    return self.mlp(x, torch.cat(parts, 0).unsqueeze(0))
)JIT";

// Note [Layer kernels]: the layer's RMSNorm and attention come in two forms of equal meaning. kPortable is the
// source above, of ops libtorch 1.13 has too, so that an entry written anywhere loads everywhere; it is what
// model.pt holds. kFused (libtorch 2.4 or later: aten::rms_norm, aten::scaled_dot_product_attention) computes
// the same with fewer kernels: the norm in one (its input and output rounded as above, as Hugging Face's Llama
// does) and attention in one, over the same grouped queries and the same mask (in the weights' dtype). Kernels
// are what a captured step is made of: each costs ~1-2 us even inside a CUDA graph on the H200, where reading a
// 7B layer's weights takes ~100 us. A 7B layer's decode step in a graph (Python mirror, 8 layers, per 32): 59
// kernels before the 4-kernel rotary embedding, 53 after it (portable), 40 fused; 7.3 / 6.9 / 6.3 ms, against
// 4.4 ms for its 7 matmuls alone and 3.1 ms for the HBM roof. The daemon's engine, side by side in one lease:
// 7.31 -> 6.37 ms at batch 1, 10.33 -> 9.15 ms at 16 (bench/results/2026-12-04-layer-kernels-h200.md). The
// daemon rebuilds an entry autouvm wrote (model.yaml `module: autouvm`) at load with the fastest form its
// libtorch has (RebuildLlamaModule); a module of the user's runs as saved.
constexpr const char* kFusedRms = R"JIT(
def rms(self, x, w):
    return torch.rms_norm(x.float(), [x.size(-1)], None, self.eps).to(x.dtype) * w
)JIT";

constexpr const char* kFusedAttend = R"JIT(
def attend(self, q, keys, vals, mask):
    B = q.size(0)
    T = q.size(1)
    S = keys.size(2)
    rep = self.n_heads // self.n_kv_heads
    qh = q.transpose(1, 2).contiguous().reshape(B, self.n_kv_heads, rep * T, self.head_dim)
    m = mask.view(B, 1, 1, T, S).expand(B, 1, rep, T, S).reshape(B, 1, rep * T, S).to(qh.dtype)
    o = torch.scaled_dot_product_attention(qh, keys, vals, m, 0.0, False, scale=self.scale)
    return o.reshape(B, self.n_heads, T, self.head_dim).transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
)JIT";

// Note [Joined projections]: the module a rebuild makes (RebuildLlamaModule) holds each layer's query, key and value
// matrices as one [q + 2 kv, dim] matrix (wqkv, and bqkv where the model has biases) and its gate and up matrices as
// one [2 ffn, dim] (w_gate_up): one matrix product where there were three and two. Reading a matrix is what a decode
// step is made of, and cuBLAS reads the larger ones closer to the HBM's rate (H200, one product in a graph, batch 1:
// 4096 x 4096 at 3.3 TB/s, 12288 x 4096 at 3.7, 22016 x 4096 at 3.6, the roof 4.3); with the rotary embedding run
// once over the queries and keys together, a 7B layer's decode step in a graph went from 40 kernels to 30 and
// 6.20 -> 5.43 ms per 32 layers (Python mirror; bench/results/2026-12-04-plan-switches-h200.md). The queries, keys
// and values are then copied out of the joined product into tensors of their own (`fresh`), so that every later op
// sees contiguous inputs whatever the number of tokens: a slice of the product is contiguous for one token and not
// for two, and the ops that copy such an input themselves would make a step of one sequence run other ops than one
// of two (Note [Packed steps]). model.pt keeps the model contract's separate matrices (docs/model-contract.md);
// the rebuild joins them at load, freeing each part as it is joined.
constexpr const char* kJoinedQkv = R"JIT(
def fresh(self, x):
    return torch.empty(x.size(), dtype=x.dtype, device=x.device).copy_(x)

def qkv(self, x, cos, sin):
    B = x.size(0)
    T = x.size(1)
    h = self.rms(x, self.attn_norm)
    qkv = torch.matmul(h, self.wqkv.t()).view(B, T, self.n_heads + 2 * self.n_kv_heads, self.head_dim)
    qk = self.rope(qkv.narrow(2, 0, self.n_heads + self.n_kv_heads), cos, sin)
    q = self.fresh(qk.narrow(2, 0, self.n_heads))
    k = self.fresh(qk.narrow(2, self.n_heads, self.n_kv_heads))
    return q, k, self.fresh(qkv.narrow(2, self.n_heads + self.n_kv_heads, self.n_kv_heads))
)JIT";

constexpr const char* kJoinedMlp = R"JIT(
def mlp(self, x, o):
    x = x + torch.matmul(o, self.wo.t())
    h = self.rms(x, self.mlp_norm)
    gu = torch.matmul(h, self.w_gate_up.t())
    f = gu.size(-1) // 2
    return x + torch.matmul(torch.silu(gu.narrow(-1, 0, f)) * gu.narrow(-1, f, f), self.w_down.t())
)JIT";

// Note [Own layer kernels]: kernels are what a captured step is made of (Note [Layer kernels]), so kOwn runs
// autouvm's own ops (engine/layer_ops.h; CUDA kernels in runtime/cuda/layer_kernels.cu) where the joined fused
// form runs several of libtorch's each: the norm (one kernel for the casts, rms_norm and the weight's product);
// the rotary embedding of the joined product's queries and keys together with the keys' and values' writes into
// their pool rows (one for the rope's four, the three `fresh` copies and the pools' index_put_ pairs); decode rows'
// attention read straight through each sequence's block table (one for the gathers' copies, the mask's cast and
// SDPA); silu times up (one for two). The residual adds go into the products' own output (`addmm_` in place: one
// kernel for two). Prompt rows attend as before. The same op sequence serves eager, captured and planned steps, and
// each op reads its tensors where they are when it runs, as libtorch's do. The source names the ops `autouvm.x`
// (OpsResolver). On the CPU the ops' reference kernels run it, which is how CI checks this code against the
// portable form (tests/integration/own_layer_kernels_test.cc). ModelRunner chooses kOwn by default for a model on
// a GPU whose shape allows it (AUTOUVM_LAYER_KERNELS overrides): on an H100 it took the 7B's captured decode step
// from 7.43 to 6.09 ms at batch 1 and from 10.00 to 6.93 ms at batch 16 (bench/results/2026-12-05-own-kernels-h100.md).
constexpr const char* kOwnRms = R"JIT(
def rms(self, x, w):
    return autouvm.rms_norm(x, w, self.eps)
)JIT";

constexpr const char* kOwnMlp = R"JIT(
def mlp(self, x, o):
    d = x.size(-1)
    r = x.view(-1, d).addmm_(o.reshape(-1, o.size(-1)), self.wo.t())
    g = autouvm.silu_mul(torch.matmul(self.rms(r, self.mlp_norm), self.w_gate_up.t()))
    return r.addmm_(g, self.w_down.t()).view(x.size())
)JIT";

constexpr const char* kOwnStep = R"JIT(
def step(self, x, cos, sin, kc, vc, kv_rows, live: int, d_rows, d_mask, p_index, p_flat, p_rows, p_mask):
    kl = kc.narrow(0, 0, live)
    vl = vc.narrow(0, 0, live)
    h = self.rms(x, self.attn_norm)
    q = autouvm.rope_store(torch.matmul(h, self.wqkv.t()), cos, sin, kl, vl, kv_rows, self.n_heads, self.n_kv_heads)
    nd = d_rows.size(0)
    if p_index.size(0) == 0:
        return self.mlp(x, autouvm.decode_attention(q, kl, vl, d_rows, d_mask, self.scale))
    parts: List[Tensor] = []
    if nd > 0:
        parts.append(autouvm.decode_attention(q.narrow(0, 0, nd), kl, vl, d_rows, d_mask, self.scale))
    o = self.attend(q[p_index], self.gather(kl, p_rows), self.gather(vl, p_rows), p_mask)
    parts.append(o.view(-1, o.size(2)).index_select(0, p_flat))
    return self.mlp(x, torch.cat(parts, 0))
)JIT";

// Resolves `autouvm` in a module's source to the autouvm:: ops (engine/layer_ops.h), as `torch` is to aten's.
struct OpsResolver final : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction& m,
                                                         const torch::jit::SourceRange& loc) override {
    if (name == "autouvm") return std::make_shared<torch::jit::BuiltinModule>("autouvm");
    return torch::jit::nativeResolver()->resolveValue(name, m, loc);
  }
};

// `source` with the def of `name` (from its "def name(" up to the next def or the end) replaced by `def_source`.
std::string ReplaceDef(const std::string& source, const std::string& name, const std::string& def_source) {
  const size_t at = source.find(absl::StrCat("\ndef ", name, "("));
  const size_t end = source.find("\ndef ", at + 1);
  return absl::StrCat(source.substr(0, at), def_source, end == std::string::npos ? "" : source.substr(end + 1));
}

std::string WithKernels(std::string source, LayerKernels kernels, bool layer) {
  if (kernels == LayerKernels::kPortable) return source;
  source = ReplaceDef(source, "rms", kernels == LayerKernels::kOwn ? kOwnRms : kFusedRms);
  // kOwn's prompt rows attend as kFused's where libtorch has SDPA, else as kPortable's.
  return layer && FusedKernelsAvailable() ? ReplaceDef(source, "attend", kFusedAttend) : source;
}

// The layer's source, with the projections' biases added where the model has them (in the source, not
// tested at run time: the interpreter runs no more ops than the model needs).
std::string LayerSource(bool attention_bias, LayerKernels kernels, Projections projections) {
  std::string source = WithKernels(kLayerSource, kernels, /*layer=*/true);
  const bool joined = projections == Projections::kJoined;
  if (joined) source = ReplaceDef(ReplaceDef(source, "qkv", kJoinedQkv), "mlp", kJoinedMlp);
  if (kernels == LayerKernels::kOwn) source = ReplaceDef(ReplaceDef(source, "mlp", kOwnMlp), "step", kOwnStep);
  if (!attention_bias) return source;
  for (const char* w : joined ? std::vector<const char*>{"qkv"} : std::vector<const char*>{"q", "k", "v"}) {
    const std::string plain = absl::StrCat("torch.matmul(h, self.w", w, ".t())");
    const std::string biased = absl::StrCat("(", plain, " + self.b", w, ")");
    for (size_t at = source.find(plain); at != std::string::npos; at = source.find(plain, at + biased.size())) {
      source.replace(at, plain.size(), biased);
    }
  }
  return source;
}

std::string TopSource(int64_t n_layers, LayerKernels kernels) {
  std::string fwd_calls, full_calls, step_calls;
  for (int64_t i = 0; i < n_layers; ++i) {
    absl::StrAppend(&fwd_calls, "    x = self.layer", i, ".forward(x, cos, sin, mask, k_cache[", i, "], v_cache[", i,
                    "], slots, slot_ix, pos)\n");
    absl::StrAppend(&full_calls, "    x = self.layer", i, ".full(x, cos, sin, mask)\n");
    absl::StrAppend(&step_calls, "    x = self.layer", i, ".step(x, cos, sin, k_caches[", i, "], v_caches[", i,
                    "], kv_rows, live, d_rows, d_mask, p_index, p_flat, p_rows, p_mask)\n");
  }
  return WithKernels(absl::StrCat(R"JIT(
def rms(self, x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
    return y.to(x.dtype) * w

def rotary(self, pos, dim: int):
    c = self.rope_cos[pos].unsqueeze(dim).to(self.tok_embeddings.dtype)
    s = self.rope_sin[pos].unsqueeze(dim).to(self.tok_embeddings.dtype)
    return torch.cat([c, c], dim=-1), torch.cat([-s, s], dim=-1)

def head(self, x):
    return torch.matmul(self.rms(x, self.norm), self.lm_head.t()).float()

def forward(self, tokens, slots, start_pos, k_cache, v_cache):
    B = tokens.size(0)
    T = tokens.size(1)
    S = k_cache.size(3)
    pos = start_pos.unsqueeze(1) + torch.arange(T, device=tokens.device).unsqueeze(0)
    cos, sin = self.rotary(pos, 2)
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
    cos, sin = self.rotary(pos, 2)
    keypos = torch.arange(T, device=tokens.device).view(1, 1, 1, T)
    mask = torch.zeros([1, 1, T, T], device=tokens.device)
    mask = mask.masked_fill(keypos > pos.view(1, 1, T, 1), float("-inf"))
    x = torch.embedding(self.tok_embeddings, tokens)
)JIT",
                                  full_calls, R"JIT(    return self.head(x)

def step(self, tokens, positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, live: int,
         k_caches: List[Tensor], v_caches: List[Tensor]):
    dev = tokens.device
    cos, sin = self.rotary(positions.unsqueeze(0), 2)
    nd = d_rows.size(0)
    d_span = d_rows.size(1)
    d_pos = positions[:nd].view(nd, 1, 1, 1)
    d_keys = torch.arange(d_span, device=dev).view(1, 1, 1, d_span)
    d_mask = torch.zeros([nd, 1, 1, d_span], device=dev).masked_fill(d_keys > d_pos, float("-inf"))
    R = p_index.size(0)
    T = p_index.size(1)
    p_span = p_rows.size(1)
    p_pos = positions[p_index].view(R, 1, T, 1)
    p_keys = torch.arange(p_span, device=dev).view(1, 1, 1, p_span)
    p_mask = torch.zeros([R, 1, T, p_span], device=dev).masked_fill(p_keys > p_pos, float("-inf"))
    x = torch.embedding(self.tok_embeddings, tokens).unsqueeze(0)
)JIT",
                                  step_calls, "    return self.head(x[0].index_select(0, logit_ix))\n"),
                     kernels, /*layer=*/false);
}

void AddCommonAttributes(torch::jit::Module& m, const ModelConfig& c) {
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_attribute("eps", c10::FloatType::get(), c.norm_eps);
}

// The parameter `name` from `parameter`, checked against the shape and dtype the module needs.
absl::StatusOr<torch::Tensor> Take(const LlamaParameter& parameter, const std::string& name,
                                   const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  ASSIGN_OR_RETURN(torch::Tensor t, parameter(name, shape));
  if (t.sizes().vec() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": shape [", absl::StrJoin(t.sizes().vec(), ", "),
                                                   "], the model needs [", absl::StrJoin(shape, ", "), "]"));
  }
  if (t.scalar_type() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": dtype ", std::string(c10::toString(t.scalar_type())),
                                                   ", the model needs ", std::string(c10::toString(dtype))));
  }
  return t;
}

// `parts` (taken in order, each checked) joined along their first dimension, each part emptied once joined (Note
// [Joined projections]). Placeholders of generated weights (engine/llama_builder.cc: one element broadcast) join
// into a placeholder of the joined shape.
absl::StatusOr<torch::Tensor> Join(const ModelConfig& c, int64_t i, const LlamaParameter& parameter,
                                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  const c10::ScalarType dtype = TorchDtype(c.dtype);
  std::vector<torch::Tensor> taken;
  std::vector<int64_t> shape = parts.front().second;
  shape[0] = 0;
  bool placeholders = false;
  for (const auto& [name, part_shape] : parts) {
    ASSIGN_OR_RETURN(torch::Tensor t, Take(parameter, absl::StrCat("layer", i, ".", name), part_shape, dtype));
    placeholders = placeholders || (t.numel() > 1 && t.stride(0) == 0);
    shape[0] += part_shape[0];
    taken.push_back(t);
  }
  torch::Tensor joined = placeholders ? torch::zeros({1}, dtype).expand(shape) : torch::cat(taken, 0);
  for (torch::Tensor& t : taken) t.set_data(torch::empty({0}, t.options()));
  return joined;
}

// Note [One type for every layer]: every layer is an object of the first layer's class type, as
// TorchScript's own ModuleList of one class is. A distinct class per layer made compiling the top module
// (BuildLlamaModule's define, and torch::jit::load of its model.pt, which compiles the same source) grow
// exponentially with the layer count in libtorch 1.13's alias analysis: 20 layers 2.6 s, 24 layers 40 s,
// 32 layers (Llama 2 7B) more than 24 GB of memory; with one type, 80 layers compile in 20 ms.
absl::StatusOr<torch::jit::Module> BuildLayer(const ModelConfig& c, int64_t i, const LlamaParameter& parameter,
                                              const torch::jit::Module* first, LayerKernels kernels,
                                              Projections projections) {
  const c10::ScalarType dtype = TorchDtype(c.dtype);
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"attn_norm", {c.dim}}, {"wq", {q_dim, c.dim}}};
  if (c.attention_bias) shapes.push_back({"bq", {q_dim}});
  shapes.push_back({"wk", {kv_dim, c.dim}});
  if (c.attention_bias) shapes.push_back({"bk", {kv_dim}});
  shapes.push_back({"wv", {kv_dim, c.dim}});
  if (c.attention_bias) shapes.push_back({"bv", {kv_dim}});
  for (auto& s : std::vector<std::pair<std::string, std::vector<int64_t>>>{{"wo", {c.dim, q_dim}},
                                                                           {"mlp_norm", {c.dim}},
                                                                           {"w_gate", {c.ffn_dim, c.dim}},
                                                                           {"w_up", {c.ffn_dim, c.dim}},
                                                                           {"w_down", {c.dim, c.ffn_dim}}}) {
    shapes.push_back(std::move(s));
  }
  const std::vector<std::pair<std::string, c10::IValue>> attributes = {
      {"training", false},          {"eps", c.norm_eps},      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"scale", 1.0 / std::sqrt(double(c.head_dim))}};
  torch::jit::Module layer = first == nullptr ? torch::jit::Module("LlamaLayer")
                                              : torch::jit::Module(first->_ivalue()->compilation_unit(), first->type());
  for (const auto& [name, value] : attributes) {
    if (first == nullptr) {
      layer.register_attribute(name, value.type(), value);
    } else {
      layer.setattr(name, value);
    }
  }
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (first == nullptr) {
      layer.register_parameter(name, t, false);
    } else {
      layer.setattr(name, t);
    }
  };
  // Note [Joined projections]: each group's parts become one parameter, in the place of its first part.
  struct Group {
    const char* joined;
    std::vector<std::string> parts;
  };
  std::vector<Group> groups;
  if (projections == Projections::kJoined) {
    groups = {{"wqkv", {"wq", "wk", "wv"}}, {"bqkv", {"bq", "bk", "bv"}}, {"w_gate_up", {"w_gate", "w_up"}}};
  }
  for (const auto& [name, shape] : shapes) {
    const auto group = std::find_if(groups.begin(), groups.end(), [&name](const Group& g) {
      return std::find(g.parts.begin(), g.parts.end(), name) != g.parts.end();
    });
    if (group == groups.end()) {
      ASSIGN_OR_RETURN(torch::Tensor t, Take(parameter, absl::StrCat("layer", i, ".", name), shape, dtype));
      add(name, t);
      continue;
    }
    if (name != group->parts.front()) continue;  // joined with its group's first part
    std::vector<std::pair<std::string, std::vector<int64_t>>> parts;
    for (const std::string& part : group->parts) {
      parts.push_back(*std::find_if(shapes.begin(), shapes.end(), [&part](const auto& s) { return s.first == part; }));
    }
    ASSIGN_OR_RETURN(torch::Tensor t, Join(c, i, parameter, parts));
    add(group->joined, t);
  }
  if (first == nullptr)
    layer.define(LayerSource(c.attention_bias, kernels, projections), std::make_shared<OpsResolver>());
  return layer;
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> RopeTables(const ModelConfig& c) {
  // As transformers' rotary embedding: inv_freq = 1 / theta^(2i / head_dim) and angles = position x
  // inv_freq, in float32.
  torch::Tensor inv_freq =
      1.0 / torch::pow(c.rope_theta, torch::arange(0, c.head_dim, 2, torch::kLong).to(torch::kFloat) /
                                         static_cast<double>(c.head_dim));
  if (c.rope_scaling == "linear") {
    inv_freq = inv_freq / c.rope_scaling_factor;
  } else if (c.rope_scaling == "llama3") {
    // Llama 3.1's: long wavelengths stretched by the factor, short ones kept, a blend between.
    const double old_len = static_cast<double>(c.rope_original_max_seq);
    const double low_wavelen = old_len / c.rope_low_freq_factor, high_wavelen = old_len / c.rope_high_freq_factor;
    const torch::Tensor wavelen = 2 * M_PI / inv_freq;
    torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / c.rope_scaling_factor, inv_freq);
    const torch::Tensor smooth =
        (old_len / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
    const torch::Tensor smoothed = (1 - smooth) * scaled / c.rope_scaling_factor + smooth * scaled;
    const torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv_freq = torch::where(medium, smoothed, scaled);
  }
  const torch::Tensor angles = torch::outer(torch::arange(c.max_seq, torch::kLong).to(torch::kFloat), inv_freq);
  return {angles.cos().contiguous(), angles.sin().contiguous()};
}

bool FusedKernelsAvailable() {
  return TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);
}

bool OwnKernelsAvailable(const ModelConfig& c, bool cuda) {
  return c.head_dim % 2 == 0 && c.head_dim <= 256 && LayerOpsHaveKernels(cuda);
}

absl::StatusOr<torch::jit::Module> BuildLlamaModule(const ModelConfig& c, const LlamaParameter& parameter,
                                                    LayerKernels kernels, Projections projections) {
  RETURN_IF_ERROR(ValidateModelConfig(c));
  if (kernels == LayerKernels::kFused && !FusedKernelsAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the fused layer kernels need libtorch 2.4 or later; this is ", TORCH_VERSION));
  }
  if (kernels == LayerKernels::kOwn && (projections != Projections::kJoined || !OwnKernelsAvailable(c, false))) {
    return absl::FailedPreconditionError(
        "autouvm's own layer kernels need joined projections and an even head_dim of at most 256");
  }
  torch::NoGradGuard no_grad;
  try {
    const c10::ScalarType dtype = TorchDtype(c.dtype);
    torch::jit::Module m("LlamaForCausalLM");
    AddCommonAttributes(m, c);
    ASSIGN_OR_RETURN(torch::Tensor embeddings, Take(parameter, "tok_embeddings", {c.vocab_size, c.dim}, dtype));
    m.register_parameter("tok_embeddings", embeddings, false);
    std::optional<torch::jit::Module> first;  // Note [One type for every layer]
    for (int64_t i = 0; i < c.n_layers; ++i) {
      ASSIGN_OR_RETURN(torch::jit::Module layer,
                       BuildLayer(c, i, parameter, first ? &*first : nullptr, kernels, projections));
      m.register_module(absl::StrCat("layer", i), layer);
      if (!first) first = layer;
    }
    ASSIGN_OR_RETURN(torch::Tensor norm, Take(parameter, "norm", {c.dim}, dtype));
    m.register_parameter("norm", norm, false);
    ASSIGN_OR_RETURN(torch::Tensor head, Take(parameter, "lm_head", {c.vocab_size, c.dim}, dtype));
    m.register_parameter("lm_head", head, false);
    auto [cos, sin] = RopeTables(c);
    m.register_buffer("rope_cos", cos);
    m.register_buffer("rope_sin", sin);
    m.define(TopSource(c.n_layers, kernels), std::make_shared<OpsResolver>());
    return m;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("building the TorchScript model failed: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<torch::jit::Module> RebuildLlamaModule(const ModelConfig& config, torch::jit::Module& loaded,
                                                      LayerKernels kernels) {
  std::unordered_map<std::string, torch::Tensor> parameters;
  for (const auto& p : loaded.named_parameters(/*recurse=*/true)) parameters.emplace(p.name, p.value);
  return BuildLlamaModule(
      config,
      [&](const std::string& name, const std::vector<int64_t>&) -> absl::StatusOr<torch::Tensor> {
        auto it = parameters.find(name);
        if (it == parameters.end()) return absl::InvalidArgumentError(absl::StrCat(name, ": not in model.pt"));
        return it->second;
      },
      kernels, Projections::kJoined);
}

absl::Status WriteLlamaEntry(const ModelConfig& given, torch::jit::Module& module, const std::string& repo_dir,
                             const std::string& yaml_comment) {
  namespace fs = std::filesystem;
  ModelConfig config = given;
  config.module = "autouvm";  // Note [Layer kernels]: the module is BuildLlamaModule's
  const fs::path dir = fs::path(repo_dir) / config.name;
  if (const fs::path file(config.chat_template_file); file.filename() != file) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat_template_file: \"", config.chat_template_file, "\" is not a name in the entry's directory"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  try {
    module.save((dir / "model.pt.tmp").string());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("writing ", (dir / "model.pt.tmp").string(), " failed: ", e.what_without_backtrace()));
  }
  if (!config.chat_template_file.empty()) {
    const fs::path file(config.chat_template_file);
    std::ofstream out(dir / file, std::ios::binary);
    out << config.chat_template;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", (dir / file).string()));
  }
  {
    std::ofstream out(dir / "model.yaml.tmp");
    out << yaml_comment << ModelConfigToYaml(config);
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", (dir / "model.yaml.tmp").string()));
  }
  fs::rename(dir / "model.pt.tmp", dir / "model.pt", ec);
  if (!ec) fs::rename(dir / "model.yaml.tmp", dir / "model.yaml", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot finish writing ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace autouvm::engine
