// The layer kernels of runtime/cuda/layer_kernels.h (Note [Own layer kernels], engine/llama_module.cc):
// each replaces several of libtorch's, whose every launch costs ~1-2 us even inside a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "runtime/cuda/layer_kernels.h"

namespace autouvm::runtime::cuda {
namespace {

// A dtype's float conversions, rounding to nearest even as libtorch's do.
template <typename T>
struct Cvt;
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float From(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 To(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Cvt<__half> {
  static __device__ __forceinline__ float From(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half To(float v) { return __float2half_rn(v); }
};
template <>
struct Cvt<float> {
  static __device__ __forceinline__ float From(float v) { return v; }
  static __device__ __forceinline__ float To(float v) { return v; }
};

// `v` rounded to T and back: what a libtorch op on T tensors keeps of a float result.
template <typename T>
__device__ __forceinline__ float Round(float v) {
  return Cvt<T>::From(Cvt<T>::To(v));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kNormThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int64_t dim, float eps) {
  __shared__ float partial[kNormThreads / 32];
  const T* row = x + blockIdx.x * dim;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    const float v = Cvt<T>::From(row[i]);
    sum += v * v;
  }
  sum = WarpSum(sum);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  float all = 0.f;
  for (int i = 0; i < kNormThreads / 32; ++i) all += partial[i];
  const float r = rsqrtf(all / static_cast<float>(dim) + eps);
  T* o = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    o[i] = Cvt<T>::To(Round<T>(Cvt<T>::From(row[i]) * r) * Cvt<T>::From(w[i]));
  }
}

template <typename T>
__global__ void SiluMulKernel(const T* __restrict__ gu, T* __restrict__ out, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const float g = Cvt<T>::From(gu[r * 2 * f + j]);
    const float silu = Round<T>(g / (1.f + expf(-g)));
    out[i] = Cvt<T>::To(silu * Cvt<T>::From(gu[r * 2 * f + f + j]));
  }
}

// One block per (token, head) of the joined product; thread d rotates elements d and d + half.
template <typename T>
__global__ void RopeStoreKernel(const T* __restrict__ qkv, const T* __restrict__ cos, const T* __restrict__ sin,
                                T* __restrict__ q, T* __restrict__ k_pool, T* __restrict__ v_pool,
                                const int64_t* __restrict__ kv_rows, int n_heads, int n_kv_heads, int head_dim) {
  const int64_t t = blockIdx.x;
  const int head = blockIdx.y;
  const int half = head_dim / 2;
  const T* src = qkv + (t * (n_heads + 2 * n_kv_heads) + head) * head_dim;
  T* dst;
  if (head < n_heads) {
    dst = q + (t * n_heads + head) * head_dim;
  } else if (head < n_heads + n_kv_heads) {
    dst = k_pool + (kv_rows[t] * n_kv_heads + (head - n_heads)) * head_dim;
  } else {
    dst = v_pool + (kv_rows[t] * n_kv_heads + (head - n_heads - n_kv_heads)) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) dst[d] = src[d];
    return;
  }
  const T* c = cos + t * head_dim;
  const T* s = sin + t * head_dim;
  for (int d = threadIdx.x; d < half; d += blockDim.x) {
    const float x1 = Cvt<T>::From(src[d]), x2 = Cvt<T>::From(src[d + half]);
    // __fmul_rn/__fadd_rn: never contracted into an fma, so each product is rounded as the reference's is
    // (for float, Round is the identity and would not stop the contraction).
    dst[d] =
        Cvt<T>::To(__fadd_rn(Round<T>(__fmul_rn(x1, Cvt<T>::From(c[d]))), Round<T>(__fmul_rn(x2, Cvt<T>::From(s[d])))));
    dst[d + half] = Cvt<T>::To(__fadd_rn(Round<T>(__fmul_rn(x2, Cvt<T>::From(c[d + half]))),
                                         Round<T>(__fmul_rn(x1, Cvt<T>::From(s[d + half])))));
  }
}

constexpr int kAttentionWarps = 8;
constexpr int kPerLane = kMaxAttentionHeadDim / 32;

// One block per (row, query head). Warp w takes keys w, w + 8, ...; lane l holds elements l, l + 32, ... of
// the query and of its running output, with a running maximum and sum (online softmax); the warps' partial
// results are merged at the end.
template <typename T>
__global__ void __launch_bounds__(kAttentionWarps * 32)
    DecodeAttentionKernel(const T* __restrict__ q, const T* __restrict__ k_pool, const T* __restrict__ v_pool,
                          const int64_t* __restrict__ key_rows, const float* __restrict__ mask, T* __restrict__ out,
                          int64_t span, int n_heads, int n_kv_heads, int head_dim, float scale) {
  __shared__ float acc_all[kAttentionWarps][kMaxAttentionHeadDim];
  __shared__ float max_all[kAttentionWarps], sum_all[kAttentionWarps];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int kvh = h / (n_heads / n_kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = e * 32 + lane;
    qr[e] = d < head_dim ? Cvt<T>::From(q[(i * n_heads + h) * head_dim + d]) : 0.f;
    acc[e] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int64_t* rows = key_rows + i * span;
  const float* mk = mask + i * span;
  for (int64_t j = warp; j < span; j += kAttentionWarps) {
    const float add = mk[j];
    if (add == -INFINITY) continue;
    const int64_t base = (rows[j] * n_kv_heads + kvh) * head_dim;
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = e * 32 + lane;
      if (d < head_dim) dot += qr[e] * Cvt<T>::From(k_pool[base + d]);
    }
    const float score = WarpSum(dot) * scale + add;
    const float m_new = fmaxf(m, score);
    const float keep = expf(m - m_new), p = expf(score - m_new);
    l = l * keep + p;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int d = e * 32 + lane;
      acc[e] = acc[e] * keep + (d < head_dim ? p * Cvt<T>::From(v_pool[base + d]) : 0.f);
    }
    m = m_new;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int d = e * 32 + lane;
    if (d < head_dim) acc_all[warp][d] = acc[e];
  }
  if (lane == 0) {
    max_all[warp] = m;
    sum_all[warp] = l;
  }
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) top = fmaxf(top, max_all[w]);
  float total = 0.f;
  for (int w = 0; w < kAttentionWarps; ++w)
    total += max_all[w] == -INFINITY ? 0.f : sum_all[w] * expf(max_all[w] - top);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float v = 0.f;
    for (int w = 0; w < kAttentionWarps; ++w) {
      if (max_all[w] != -INFINITY) v += acc_all[w][d] * expf(max_all[w] - top);
    }
    out[(i * n_heads + h) * head_dim + d] = Cvt<T>::To(total > 0.f ? v / total : 0.f);
  }
}

template <template <typename> class Launch, typename... Args>
cudaError_t ByDtype(KernelDtype dtype, Args... args) {
  switch (dtype) {
    case KernelDtype::kBf16:
      return Launch<__nv_bfloat16>::Run(args...);
    case KernelDtype::kF16:
      return Launch<__half>::Run(args...);
    case KernelDtype::kF32:
      return Launch<float>::Run(args...);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
struct RmsNormLaunch {
  static cudaError_t Run(const void* x, const void* w, void* out, int64_t rows, int64_t dim, float eps,
                         cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    RmsNormKernel<T><<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(out), dim, eps);
    return cudaGetLastError();
  }
};

template <typename T>
struct SiluMulLaunch {
  static cudaError_t Run(const void* gu, void* out, int64_t rows, int64_t f, cudaStream_t stream) {
    const int64_t n = rows * f;
    if (n == 0) return cudaSuccess;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
    SiluMulKernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<const T*>(gu),
                                                                            static_cast<T*>(out), rows, f);
    return cudaGetLastError();
  }
};

template <typename T>
struct RopeStoreLaunch {
  static cudaError_t Run(const void* qkv, const void* cos, const void* sin, void* q, void* k_pool, void* v_pool,
                         const int64_t* kv_rows, int64_t tokens, int n_heads, int n_kv_heads, int head_dim,
                         cudaStream_t stream) {
    if (tokens == 0) return cudaSuccess;
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(n_heads + 2 * n_kv_heads));
    const int threads = std::min(std::max(head_dim / 2, 32), 256);
    RopeStoreKernel<T><<<grid, threads, 0, stream>>>(
        static_cast<const T*>(qkv), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(q),
        static_cast<T*>(k_pool), static_cast<T*>(v_pool), kv_rows, n_heads, n_kv_heads, head_dim);
    return cudaGetLastError();
  }
};

template <typename T>
struct DecodeAttentionLaunch {
  static cudaError_t Run(const void* q, const void* k_pool, const void* v_pool, const int64_t* key_rows,
                         const float* mask, void* out, int64_t rows, int64_t span, int n_heads, int n_kv_heads,
                         int head_dim, float scale, cudaStream_t stream) {
    if (rows == 0) return cudaSuccess;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(n_heads));
    DecodeAttentionKernel<T><<<grid, kAttentionWarps * 32, 0, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k_pool), static_cast<const T*>(v_pool), key_rows, mask,
        static_cast<T*>(out), span, n_heads, n_kv_heads, head_dim, scale);
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t LaunchRmsNorm(KernelDtype dtype, const void* x, const void* w, void* out, int64_t rows, int64_t dim,
                          float eps, cudaStream_t stream) {
  return ByDtype<RmsNormLaunch>(dtype, x, w, out, rows, dim, eps, stream);
}

cudaError_t LaunchSiluMul(KernelDtype dtype, const void* gu, void* out, int64_t rows, int64_t f, cudaStream_t stream) {
  return ByDtype<SiluMulLaunch>(dtype, gu, out, rows, f, stream);
}

cudaError_t LaunchRopeStore(KernelDtype dtype, const void* qkv, const void* cos, const void* sin, void* q, void* k_pool,
                            void* v_pool, const int64_t* kv_rows, int64_t tokens, int n_heads, int n_kv_heads,
                            int head_dim, cudaStream_t stream) {
  return ByDtype<RopeStoreLaunch>(dtype, qkv, cos, sin, q, k_pool, v_pool, kv_rows, tokens, n_heads, n_kv_heads,
                                  head_dim, stream);
}

cudaError_t LaunchDecodeAttention(KernelDtype dtype, const void* q, const void* k_pool, const void* v_pool,
                                  const int64_t* key_rows, const float* mask, void* out, int64_t rows, int64_t span,
                                  int n_heads, int n_kv_heads, int head_dim, float scale, cudaStream_t stream) {
  return ByDtype<DecodeAttentionLaunch>(dtype, q, k_pool, v_pool, key_rows, mask, out, rows, span, n_heads, n_kv_heads,
                                        head_dim, scale, stream);
}

}  // namespace autouvm::runtime::cuda
