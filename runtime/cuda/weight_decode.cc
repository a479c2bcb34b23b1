#include "runtime/cuda/weight_decode.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/weight_decode_kernel.h"

namespace autouvm::runtime::cuda {
namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

absl::Status Launch(DecodeSections sec, const weight_codec::Header& h, int64_t blocks, uint16_t* out, void* stream) {
  sec.count = h.count;
  sec.index_bytes_per_block = h.index_bytes_per_block();
  sec.block = h.block;
  sec.bits = h.index_bits;
  for (int i = 0; i < 31; ++i) sec.table[i] = h.table[i];
  sec.table[31] = 0;
  if (blocks == 0) return absl::OkStatus();
  if (const cudaError_t e = LaunchDecodeKernel(sec, blocks, out, static_cast<cudaStream_t>(stream)); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("weight decode: launching the kernel: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchWeightDecode(const void* encoded, const weight_codec::Header& h, uint16_t* out, void* stream) {
  if (!Aligned16(encoded) || !Aligned16(out)) {
    return absl::InvalidArgumentError("weight decode: the encoding and the output must be 16-byte aligned");
  }
  const auto* base = static_cast<const uint8_t*>(encoded);
  if (h.count == 0) return absl::OkStatus();
  if (h.mode == weight_codec::Mode::kPlain) {
    const cudaError_t e = cudaMemcpyAsync(out, base + weight_codec::kHeaderBytes, 2 * h.count, cudaMemcpyDefault,
                                          static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess)
      return absl::InternalError(absl::StrCat("weight decode: cudaMemcpyAsync: ", cudaGetErrorString(e)));
    return absl::OkStatus();
  }
  DecodeSections sec;
  sec.signs = base + h.signs_offset;
  sec.indices = base + h.indices_offset;
  sec.escape_starts = reinterpret_cast<const uint32_t*>(base + h.escape_starts_offset);
  sec.escape_exponents = base + h.escape_exponents_offset;
  sec.first_block = 0;
  sec.escape_base = 0;
  return Launch(sec, h, h.blocks(), out, stream);
}

absl::Status LaunchWeightDecodeChunk(const void* landing, const weight_codec::Header& h, const weight_codec::Chunk& c,
                                     uint16_t* out, void* stream) {
  if (!Aligned16(landing) || !Aligned16(out)) {
    return absl::InvalidArgumentError("weight decode: the landing buffer and the output must be 16-byte aligned");
  }
  if (h.mode != weight_codec::Mode::kExponentCoded || c.first_block < 0 || c.blocks < 0 ||
      c.first_block + c.blocks > h.blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight decode: blocks ", c.first_block, "+", c.blocks, " of an encoding of ", h.blocks()));
  }
  const auto* base = static_cast<const uint8_t*>(landing);
  DecodeSections sec;
  sec.signs = base + c.signs.landing;
  sec.indices = base + c.indices.landing;
  sec.escape_starts = reinterpret_cast<const uint32_t*>(base + c.escape_starts.landing);
  sec.escape_exponents = base + c.escape_exponents.landing;
  sec.first_block = c.first_block;
  sec.escape_base = c.escape_base;
  return Launch(sec, h, c.blocks, out, stream);
}

}  // namespace autouvm::runtime::cuda
