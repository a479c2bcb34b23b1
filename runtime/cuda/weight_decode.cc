#include "runtime/cuda/weight_decode.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/weight_decode_kernel.h"

namespace autouvm::runtime::cuda {

absl::Status LaunchWeightDecode(const void* encoded, const weight_codec::Header& h, uint16_t* out, void* stream) {
  if (reinterpret_cast<uintptr_t>(encoded) % 8 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return absl::InvalidArgumentError("weight decode: the encoding must be 8-byte and the output 16-byte aligned");
  }
  const auto* base = static_cast<const uint8_t*>(encoded);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (h.count == 0) return absl::OkStatus();
  if (h.mode == weight_codec::Mode::kPlain) {
    const cudaError_t e =
        cudaMemcpyAsync(out, base + weight_codec::kHeaderBytes, 2 * h.count, cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess)
      return absl::InternalError(absl::StrCat("weight decode: cudaMemcpyAsync: ", cudaGetErrorString(e)));
    return absl::OkStatus();
  }
  DecodeSections sec;
  sec.signs = base + h.signs_offset;
  sec.indices = base + h.indices_offset;
  sec.escape_starts = reinterpret_cast<const uint32_t*>(base + h.escape_starts_offset);
  sec.escape_exponents = base + h.escape_exponents_offset;
  sec.count = h.count;
  sec.index_bytes_per_block = h.index_bytes_per_block();
  sec.block = h.block;
  sec.bits = h.index_bits;
  for (int i = 0; i < 31; ++i) sec.table[i] = h.table[i];
  sec.table[31] = 0;
  if (const cudaError_t e = LaunchDecodeKernel(sec, h.blocks(), out, s); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("weight decode: launching the kernel: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace autouvm::runtime::cuda
