// The decode kernel's launcher (weight_decode_kernel.cu), in plain CUDA: what runtime/cuda/weight_decode.cc
// calls. Not for other callers: LaunchWeightDecode checks what this trusts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace autouvm::runtime::cuda {

// An exponent-coded encoding's sections in device memory (docs/weight-compression.md), or those of a
// chunk of its blocks (Note [Coded staging in chunks]): block first_block + k's signs start at
// signs + k * block, its indices at indices + k * index_bytes_per_block, its escape start is
// escape_starts[k], and escape_exponents holds the escapes from escape_base on.
struct DecodeSections {
  const uint8_t* signs;
  const uint8_t* indices;
  const uint32_t* escape_starts;
  const uint8_t* escape_exponents;
  int64_t first_block;
  uint32_t escape_base;
  int64_t count;
  int64_t index_bytes_per_block;
  uint32_t block;
  int bits;
  uint8_t table[32];
};

// One thread block per block of values (`blocks` of them from sections.first_block), writing each
// value at its place in `out` (the whole tensor), on `stream`; the launch's error.
cudaError_t LaunchDecodeKernel(const DecodeSections& sections, int64_t blocks, uint16_t* out, cudaStream_t stream);

}  // namespace autouvm::runtime::cuda
