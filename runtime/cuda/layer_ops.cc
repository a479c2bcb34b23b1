#include "runtime/cuda/layer_ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <string>

#include "runtime/cuda/layer_kernels.h"

namespace autouvm::runtime::cuda {
namespace {

KernelDtype DtypeOf(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kBFloat16:
      return KernelDtype::kBf16;
    case at::kHalf:
      return KernelDtype::kF16;
    case at::kFloat:
      return KernelDtype::kF32;
    default:
      break;
  }
  TORCH_CHECK(false, op, ": dtype ", t.scalar_type(), " is not bf16, fp16 or fp32");
  return KernelDtype::kF32;  // not reached
}

void CheckOn(const at::Tensor& t, const at::Tensor& like, const char* op, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.device() == like.device(), op, ": ", name, " is on ", t.device(), ", not ",
              like.device());
}

void CheckLaunch(cudaError_t e, const char* op) {
  TORCH_CHECK(e == cudaSuccess, op, ": the kernel's launch failed: ", cudaGetErrorString(e));
}

cudaStream_t Stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  constexpr const char* kOp = "autouvm::rms_norm";
  TORCH_CHECK(x.is_cuda(), kOp, ": x is on ", x.device(), ", not a CUDA device");
  CheckOn(w, x, kOp, "w");
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1), kOp, ": w of ", w.sizes(), " for x of ",
              x.sizes());
  TORCH_CHECK(w.scalar_type() == x.scalar_type(), kOp, ": w is ", w.scalar_type(), ", x ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = w.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t dim = x.size(-1);
  CheckLaunch(LaunchRmsNorm(DtypeOf(x, kOp), xc.data_ptr(), wc.data_ptr(), out.data_ptr(),
                            dim == 0 ? 0 : xc.numel() / dim, dim, static_cast<float>(eps), Stream()),
              kOp);
  return out;
}

at::Tensor SiluMul(const at::Tensor& gu) {
  constexpr const char* kOp = "autouvm::silu_mul";
  TORCH_CHECK(gu.is_cuda(), kOp, ": gu is on ", gu.device(), ", not a CUDA device");
  TORCH_CHECK(gu.dim() >= 1 && gu.size(-1) % 2 == 0, kOp, ": the last dimension of ", gu.sizes(), " is not even");
  const c10::cuda::CUDAGuard guard(gu.device());
  const at::Tensor g = gu.contiguous();
  std::vector<int64_t> shape = g.sizes().vec();
  const int64_t f = shape.back() / 2;
  shape.back() = f;
  at::Tensor out = at::empty(shape, g.options());
  CheckLaunch(LaunchSiluMul(DtypeOf(g, kOp), g.data_ptr(), out.data_ptr(), f == 0 ? 0 : out.numel() / f, f, Stream()),
              kOp);
  return out;
}

// A pool [rows, n_kv_heads, head_dim], contiguous, in `like`'s dtype and on its device.
void CheckPool(const at::Tensor& pool, const at::Tensor& like, int64_t n_kv_heads, int64_t head_dim, const char* op,
               const char* name) {
  CheckOn(pool, like, op, name);
  TORCH_CHECK(pool.dim() == 3 && pool.size(1) == n_kv_heads && pool.size(2) == head_dim && pool.is_contiguous(), op,
              ": ", name, " of ", pool.sizes(), " is not a contiguous [rows, ", n_kv_heads, ", ", head_dim, "]");
  TORCH_CHECK(pool.scalar_type() == like.scalar_type(), op, ": ", name, " is ", pool.scalar_type(), ", not ",
              like.scalar_type());
}

at::Tensor RopeStore(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& k_pool,
                     at::Tensor& v_pool, const at::Tensor& kv_rows, int64_t n_heads, int64_t n_kv_heads) {
  constexpr const char* kOp = "autouvm::rope_store";
  TORCH_CHECK(qkv.is_cuda(), kOp, ": qkv is on ", qkv.device(), ", not a CUDA device");
  TORCH_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, kOp, ": ", n_heads, " heads over ",
              n_kv_heads, " key/value heads");
  const int64_t width = qkv.size(-1);
  TORCH_CHECK(width % (n_heads + 2 * n_kv_heads) == 0, kOp, ": a product of width ", width, " for ", n_heads, " + 2 x ",
              n_kv_heads, " heads");
  const int64_t head_dim = width / (n_heads + 2 * n_kv_heads);
  TORCH_CHECK(head_dim % 2 == 0, kOp, ": head_dim ", head_dim, " is odd");
  const int64_t tokens = qkv.numel() / width;
  for (const auto& [t, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}}) {
    CheckOn(*t, qkv, kOp, name);
    TORCH_CHECK(t->numel() == tokens * head_dim && t->size(-1) == head_dim, kOp, ": ", name, " of ", t->sizes(),
                " for ", tokens, " tokens of head_dim ", head_dim);
    TORCH_CHECK(t->scalar_type() == qkv.scalar_type(), kOp, ": ", name, " is ", t->scalar_type(), ", not ",
                qkv.scalar_type());
  }
  CheckPool(k_pool, qkv, n_kv_heads, head_dim, kOp, "k_pool");
  CheckPool(v_pool, qkv, n_kv_heads, head_dim, kOp, "v_pool");
  CheckOn(kv_rows, qkv, kOp, "kv_rows");
  TORCH_CHECK(kv_rows.scalar_type() == at::kLong && kv_rows.numel() == tokens, kOp, ": kv_rows of ", kv_rows.sizes(),
              " (", kv_rows.scalar_type(), ") for ", tokens, " tokens");
  const c10::cuda::CUDAGuard guard(qkv.device());
  const at::Tensor x = qkv.contiguous(), c = cos.contiguous(), s = sin.contiguous(), rows = kv_rows.contiguous();
  at::Tensor q = at::empty({tokens, n_heads, head_dim}, x.options());
  CheckLaunch(
      LaunchRopeStore(DtypeOf(x, kOp), x.data_ptr(), c.data_ptr(), s.data_ptr(), q.data_ptr(), k_pool.data_ptr(),
                      v_pool.data_ptr(), rows.data_ptr<int64_t>(), tokens, static_cast<int>(n_heads),
                      static_cast<int>(n_kv_heads), static_cast<int>(head_dim), Stream()),
      kOp);
  return q;
}

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& key_rows, const at::Tensor& mask, double scale) {
  constexpr const char* kOp = "autouvm::decode_attention";
  TORCH_CHECK(q.is_cuda(), kOp, ": q is on ", q.device(), ", not a CUDA device");
  TORCH_CHECK(q.dim() == 3, kOp, ": q of ", q.sizes(), " is not [rows, heads, head_dim]");
  const int64_t rows = q.size(0), n_heads = q.size(1), head_dim = q.size(2);
  TORCH_CHECK(k_pool.dim() == 3, kOp, ": k_pool of ", k_pool.sizes(), " is not [rows, kv heads, head_dim]");
  const int64_t n_kv_heads = k_pool.size(1);
  TORCH_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, kOp, ": ", n_heads, " heads over ", n_kv_heads,
              " key/value heads");
  TORCH_CHECK(head_dim <= kMaxAttentionHeadDim, kOp, ": head_dim ", head_dim, " is over ", kMaxAttentionHeadDim);
  CheckPool(k_pool, q, n_kv_heads, head_dim, kOp, "k_pool");
  CheckPool(v_pool, q, n_kv_heads, head_dim, kOp, "v_pool");
  CheckOn(key_rows, q, kOp, "key_rows");
  TORCH_CHECK(key_rows.scalar_type() == at::kLong && key_rows.dim() == 2 && key_rows.size(0) == rows, kOp,
              ": key_rows of ", key_rows.sizes(), " (", key_rows.scalar_type(), ") for ", rows, " rows");
  const int64_t span = key_rows.size(1);
  CheckOn(mask, q, kOp, "mask");
  TORCH_CHECK(mask.scalar_type() == at::kFloat && mask.numel() == rows * span, kOp, ": mask of ", mask.sizes(), " (",
              mask.scalar_type(), ") for ", rows, " rows of span ", span);
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor qc = q.contiguous(), kr = key_rows.contiguous(), m = mask.contiguous();
  at::Tensor out = at::empty({rows, n_heads * head_dim}, qc.options());
  CheckLaunch(LaunchDecodeAttention(DtypeOf(q, kOp), qc.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(),
                                    kr.data_ptr<int64_t>(), m.data_ptr<float>(), out.data_ptr(), rows, span,
                                    static_cast<int>(n_heads), static_cast<int>(n_kv_heads), static_cast<int>(head_dim),
                                    static_cast<float>(scale), Stream()),
              kOp);
  return out;
}

}  // namespace

bool LayerOpsLinked() { return true; }

}  // namespace autouvm::runtime::cuda

TORCH_LIBRARY_IMPL(autouvm, CUDA, m) {
  namespace ops = autouvm::runtime::cuda;
  m.impl("rms_norm", &ops::RmsNorm);
  m.impl("silu_mul", &ops::SiluMul);
  m.impl("rope_store", &ops::RopeStore);
  m.impl("decode_attention", &ops::DecodeAttention);
}
