// The decode kernel of runtime/cuda/weight_decode.h, behind a plain launcher (weight_decode_kernel.h)
// so that nvcc compiles no absl header.
#include "runtime/cuda/weight_decode_kernel.h"

#include <cub/block/block_scan.cuh>

namespace autouvm::runtime::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t IndexAt(const uint64_t* words, int64_t j, int bits) {
  const int64_t bit = j * bits;
  uint64_t v = __ldg(words + bit / 64) >> (bit % 64);
  if (bit % 64 + bits > 64) v |= __ldg(words + bit / 64 + 1) << (64 - bit % 64);
  return static_cast<uint32_t>(v & ((uint64_t{1} << bits) - 1));
}

// One thread block per block of values: each thread takes a run of consecutive values, counts its
// escapes, and a block-wide exclusive scan gives where its escapes start in the block's list.
__global__ void __launch_bounds__(kThreads) DecodeKernel(DecodeSections s, uint16_t* __restrict__ out) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int64_t block = blockIdx.x;
  const int64_t begin = block * s.block;
  const int64_t per = (s.block + kThreads - 1) / kThreads;
  const int64_t first = begin + threadIdx.x * per;
  const int64_t last = min(min(first + per, begin + static_cast<int64_t>(s.block)), s.count);
  const uint64_t* words = reinterpret_cast<const uint64_t*>(s.indices + block * s.index_bytes_per_block);
  const uint32_t escape = (1u << s.bits) - 1;
  uint32_t escapes = 0;
  for (int64_t i = first; i < last; ++i) escapes += IndexAt(words, i - begin, s.bits) == escape;
  uint32_t before = 0;
  Scan(scan).ExclusiveSum(escapes, before);
  const uint8_t* escaped = s.escape_exponents + s.escape_starts[block] + before;
  for (int64_t i = first; i < last; ++i) {
    const uint32_t index = IndexAt(words, i - begin, s.bits);
    const uint32_t exponent = index == escape ? *escaped++ : s.table[index];
    const uint32_t sign = __ldg(s.signs + i);
    out[i] = static_cast<uint16_t>(((sign & 0x80u) << 8) | (exponent << 7) | (sign & 0x7Fu));
  }
}

}  // namespace

cudaError_t LaunchDecodeKernel(const DecodeSections& s, int64_t blocks, uint16_t* out, cudaStream_t stream) {
  DecodeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(s, out);
  return cudaGetLastError();
}

}  // namespace autouvm::runtime::cuda
