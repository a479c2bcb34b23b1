// The layer kernels' launchers (layer_kernels.cu), in plain CUDA: what runtime/cuda/layer_ops.cc calls for
// the autouvm:: ops of Note [Own layer kernels] (engine/llama_module.cc). Not for other callers: the ops
// check the shapes, dtypes and contiguity these trust. Every tensor is contiguous, in `dtype` but where named.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace autouvm::runtime::cuda {

enum class KernelDtype { kBf16, kF16, kF32 };

// out[r] = dtype(dtype(x[r] * rsqrt(mean(x[r]^2) + eps)) * w), x and out [rows, dim]: as
// `torch.rms_norm(x.float(), [dim], None, eps).to(x.dtype) * w`, one thread block per row.
cudaError_t LaunchRmsNorm(KernelDtype dtype, const void* x, const void* w, void* out, int64_t rows, int64_t dim,
                          float eps, cudaStream_t stream);

// out[r, j] = dtype(silu(gu[r, j])) * gu[r, f + j], gu [rows, 2f], out [rows, f].
cudaError_t LaunchSiluMul(KernelDtype dtype, const void* gu, void* out, int64_t rows, int64_t f, cudaStream_t stream);

// qkv [tokens, n_heads + 2 n_kv_heads, head_dim]; cos, sin [tokens, head_dim] (full width, sin signed): the
// rotary embedding `x * cos + cat(x2, x1) * sin` (each product and the sum rounded to dtype) of the query
// heads into q [tokens, n_heads, head_dim] and of the key heads into k_pool's row kv_rows[t] (int64), the
// value heads copied into v_pool's; the pools [rows, n_kv_heads, head_dim].
cudaError_t LaunchRopeStore(KernelDtype dtype, const void* qkv, const void* cos, const void* sin, void* q, void* k_pool,
                            void* v_pool, const int64_t* kv_rows, int64_t tokens, int n_heads, int n_kv_heads,
                            int head_dim, cudaStream_t stream);

// The largest head_dim LaunchDecodeAttention takes.
constexpr int kMaxAttentionHeadDim = 256;

// One query token per row over its keys: q [rows, n_heads, head_dim]; row i's key j is pool row
// key_rows[i, j] (int64, [rows, span]) with the additive float mask[i, j] ([rows, span]; -inf: skipped);
// out [rows, n_heads * head_dim] = softmax(q k^T * scale + mask) v, in float, rounded once. Query head h
// reads key/value head h / (n_heads / n_kv_heads).
cudaError_t LaunchDecodeAttention(KernelDtype dtype, const void* q, const void* k_pool, const void* v_pool,
                                  const int64_t* key_rows, const float* mask, void* out, int64_t rows, int64_t span,
                                  int n_heads, int n_kv_heads, int head_dim, float scale, cudaStream_t stream);

}  // namespace autouvm::runtime::cuda
