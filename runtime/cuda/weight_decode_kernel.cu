// The decode kernel of runtime/cuda/weight_decode.h, behind a plain launcher (weight_decode_kernel.h)
// so that nvcc compiles no absl header.
#include <cub/block/block_scan.cuh>

#include "runtime/cuda/weight_decode_kernel.h"

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
// escapes, and a block-wide exclusive scan gives where its escapes start in the block's list. A run of
// 16 values (blocks of 4096) reads its signs as one 16-byte load and writes its values as two 16-byte
// stores, so a warp's loads and stores are contiguous; other runs go value by value.
__global__ void __launch_bounds__(kThreads) DecodeKernel(DecodeSections s, uint16_t* __restrict__ out) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int64_t k = blockIdx.x;  // within the sections given
  const int64_t begin = (s.first_block + k) * s.block;
  const int64_t per = (s.block + kThreads - 1) / kThreads;
  const int64_t first = begin + threadIdx.x * per;
  const int64_t last = max(first, min(min(first + per, begin + static_cast<int64_t>(s.block)), s.count));
  const uint64_t* words = reinterpret_cast<const uint64_t*>(s.indices + k * s.index_bytes_per_block);
  const uint8_t* signs = s.signs + k * static_cast<int64_t>(s.block);  // the block's first value's
  const uint32_t escape = (1u << s.bits) - 1;
  uint32_t escapes = 0;
  for (int64_t i = first; i < last; ++i) escapes += IndexAt(words, i - begin, s.bits) == escape;
  uint32_t before = 0;
  Scan(scan).ExclusiveSum(escapes, before);
  const uint8_t* escaped = s.escape_exponents + (s.escape_starts[k] - s.escape_base) + before;
  auto value = [&](int64_t i, uint32_t sign) {
    const uint32_t index = IndexAt(words, i - begin, s.bits);
    const uint32_t exponent = index == escape ? *escaped++ : s.table[index];
    return static_cast<uint16_t>(((sign & 0x80u) << 8) | (exponent << 7) | (sign & 0x7Fu));
  };
  if (last - first == 16) {
    const uint4 packed = __ldg(reinterpret_cast<const uint4*>(signs + (first - begin)));
    const uint32_t sign_words[4] = {packed.x, packed.y, packed.z, packed.w};
    uint32_t pairs[8];
    for (int j = 0; j < 16; j += 2) {
      const uint32_t lo = value(first + j, sign_words[j / 4] >> (8 * (j % 4)) & 0xFF);
      const uint32_t hi = value(first + j + 1, sign_words[j / 4] >> (8 * (j % 4 + 1)) & 0xFF);
      pairs[j / 2] = lo | (hi << 16);
    }
    uint4* to = reinterpret_cast<uint4*>(out + first);
    to[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    to[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
  } else {
    for (int64_t i = first; i < last; ++i) out[i] = value(i, __ldg(signs + (i - begin)));
  }
}

}  // namespace

cudaError_t LaunchDecodeKernel(const DecodeSections& s, int64_t blocks, uint16_t* out, cudaStream_t stream) {
  DecodeKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(s, out);
  return cudaGetLastError();
}

}  // namespace autouvm::runtime::cuda
