// The autouvm:: TorchScript ops of Note [Own layer kernels] (engine/llama_module.cc): their schemas, and
// reference kernels for CPU tensors (libtorch ops, slow), so that the layer code that calls them runs and is
// tested everywhere. Their CUDA kernels are runtime/cuda/layer_ops.h's, registered where they are built.
//
//   autouvm::rms_norm(Tensor x, Tensor w, float eps) -> Tensor       # as torch.rms_norm(x.float()).to(x) * w
//   autouvm::silu_mul(Tensor gu) -> Tensor                          # silu(gu[..., :f]) * gu[..., f:]
//   autouvm::rope_store(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) k_pool, Tensor(b!) v_pool,
//                       Tensor kv_rows, int n_heads, int n_kv_heads) -> Tensor
//       qkv [..., (n_heads + 2 n_kv_heads) * head_dim] over `tokens`; cos, sin [..., head_dim] per token (full
//       width, sin signed). The rotary embedding of the query and key heads; the keys go to k_pool's rows
//       kv_rows[t], the values (as they are) to v_pool's (pools [rows, n_kv_heads, head_dim]); returns the
//       queries [tokens, n_heads, head_dim].
//   autouvm::decode_attention(Tensor q, Tensor k_pool, Tensor v_pool, Tensor key_rows, Tensor mask,
//                             float scale) -> Tensor
//       q [rows, n_heads, head_dim], one token per row; row i's key j is pool row key_rows[i, j] ([rows, span]),
//       with the additive float mask [rows, ..., span]: softmax(q k^T * scale + mask) v in float, returned as
//       [rows, n_heads * head_dim] in q's dtype. Query head h reads key/value head h / (n_heads / n_kv_heads).
//
// Internal to the engine (libtorch types stay in its .cc files).
#pragma once

namespace autouvm::engine {

// Whether the ops have a kernel for CUDA tensors (`cuda`) or CPU ones. The schemas and CPU kernels are
// registered whenever this file's library is linked (llama_module.cc calls this).
bool LayerOpsHaveKernels(bool cuda);

}  // namespace autouvm::engine
