#include "engine/layer_ops.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace autouvm::engine {
namespace {

// The CPU reference kernels: libtorch's ops, with the CUDA kernels' roundings (runtime/cuda/layer_kernels.cu).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  TORCH_CHECK(w.dim() == 1 && x.dim() >= 1 && w.size(0) == x.size(-1), "autouvm::rms_norm: w of ", w.sizes(),
              " for x of ", x.sizes());
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) * w;
}

at::Tensor SiluMul(const at::Tensor& gu) {
  TORCH_CHECK(gu.dim() >= 1 && gu.size(-1) % 2 == 0, "autouvm::silu_mul: the last dimension of ", gu.sizes(),
              " is not even");
  const int64_t f = gu.size(-1) / 2;
  return at::silu(gu.narrow(-1, 0, f)) * gu.narrow(-1, f, f);
}

at::Tensor RopeStore(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& k_pool,
                     at::Tensor& v_pool, const at::Tensor& kv_rows, int64_t n_heads, int64_t n_kv_heads) {
  const int64_t heads = n_heads + 2 * n_kv_heads;
  TORCH_CHECK(n_heads > 0 && n_kv_heads > 0 && qkv.size(-1) % heads == 0, "autouvm::rope_store: a product of width ",
              qkv.size(-1), " for ", n_heads, " + 2 x ", n_kv_heads, " heads");
  const int64_t head_dim = qkv.size(-1) / heads, tokens = qkv.numel() / qkv.size(-1), half = head_dim / 2;
  TORCH_CHECK(head_dim % 2 == 0 && cos.numel() == tokens * head_dim && sin.numel() == tokens * head_dim,
              "autouvm::rope_store: cos ", cos.sizes(), " and sin ", sin.sizes(), " for ", tokens,
              " tokens of head_dim ", head_dim);
  TORCH_CHECK(kv_rows.numel() == tokens, "autouvm::rope_store: kv_rows of ", kv_rows.sizes(), " for ", tokens,
              " tokens");
  const at::Tensor x = qkv.reshape({tokens, heads, head_dim});
  const at::Tensor qk = x.narrow(1, 0, n_heads + n_kv_heads);
  const at::Tensor rotated = at::cat({qk.narrow(2, half, half), qk.narrow(2, 0, half)}, 2);
  const at::Tensor roped = qk * cos.reshape({tokens, 1, head_dim}) + rotated * sin.reshape({tokens, 1, head_dim});
  const at::Tensor rows = kv_rows.reshape({tokens});
  k_pool.index_put_({rows}, roped.narrow(1, n_heads, n_kv_heads));
  v_pool.index_put_({rows}, x.narrow(1, n_heads + n_kv_heads, n_kv_heads));
  return roped.narrow(1, 0, n_heads).contiguous();
}

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& key_rows, const at::Tensor& mask, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_pool.dim() == 3 && key_rows.dim() == 2 && key_rows.size(0) == q.size(0),
              "autouvm::decode_attention: q ", q.sizes(), ", k_pool ", k_pool.sizes(), ", key_rows ", key_rows.sizes());
  const int64_t rows = q.size(0), n_heads = q.size(1), head_dim = q.size(2), n_kv_heads = k_pool.size(1);
  const int64_t span = key_rows.size(1);
  TORCH_CHECK(n_heads % n_kv_heads == 0 && mask.numel() == rows * span, "autouvm::decode_attention: mask ",
              mask.sizes(), " for ", rows, " rows of span ", span);
  const int64_t rep = n_heads / n_kv_heads;
  // [rows, n_heads, span, head_dim]: each query head's keys and values.
  auto by_head = [&](const at::Tensor& pool) {
    return pool.index_select(0, key_rows.reshape({-1}))
        .view({rows, span, n_kv_heads, 1, head_dim})
        .expand({rows, span, n_kv_heads, rep, head_dim})
        .reshape({rows, span, n_heads, head_dim})
        .transpose(1, 2)
        .to(at::kFloat);
  };
  const at::Tensor scores =
      at::matmul(q.to(at::kFloat).unsqueeze(2), by_head(k_pool).transpose(2, 3)).squeeze(2) * scale +
      mask.reshape({rows, 1, span});
  const at::Tensor o = at::matmul(at::softmax(scores, -1).unsqueeze(2), by_head(v_pool)).squeeze(2);
  return o.reshape({rows, n_heads * head_dim}).to(q.scalar_type());
}

}  // namespace

bool LayerOpsHaveKernels(bool cuda) {
  const auto op = c10::Dispatcher::singleton().findSchema({"autouvm::rope_store", ""});
  return op.has_value() && op->hasKernelForDispatchKey(cuda ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU);
}

}  // namespace autouvm::engine

TORCH_LIBRARY(autouvm, m) {
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> Tensor");
  m.def("silu_mul(Tensor gu) -> Tensor");
  m.def(
      "rope_store(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) k_pool, Tensor(b!) v_pool, Tensor kv_rows, "
      "int n_heads, int n_kv_heads) -> Tensor");
  m.def(
      "decode_attention(Tensor q, Tensor k_pool, Tensor v_pool, Tensor key_rows, Tensor mask, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(autouvm, CPU, m) {
  namespace ops = autouvm::engine;
  m.impl("rms_norm", &ops::RmsNorm);
  m.impl("silu_mul", &ops::SiluMul);
  m.impl("rope_store", &ops::RopeStore);
  m.impl("decode_attention", &ops::DecodeAttention);
}
