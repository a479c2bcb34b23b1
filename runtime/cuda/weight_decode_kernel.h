// The decode kernel's launcher (weight_decode_kernel.cu), in plain CUDA: what runtime/cuda/weight_decode.cc
// calls. Not for other callers: LaunchWeightDecode checks what this trusts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace autouvm::runtime::cuda {

// An exponent-coded encoding's sections in device memory (docs/weight-compression.md).
struct DecodeSections {
  const uint8_t* signs;
  const uint8_t* indices;
  const uint32_t* escape_starts;
  const uint8_t* escape_exponents;
  int64_t count;
  int64_t index_bytes_per_block;
  uint32_t block;
  int bits;
  uint8_t table[32];
};

// One thread block per block of values, on `stream`; the launch's error.
cudaError_t LaunchDecodeKernel(const DecodeSections& sections, int64_t blocks, uint16_t* out, cudaStream_t stream);

}  // namespace autouvm::runtime::cuda
