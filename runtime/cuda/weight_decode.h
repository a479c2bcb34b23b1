// The GPU decoder of exponent-coded weights (runtime/weight_codec.h, docs/weight-compression.md):
// expands an encoding in device memory into its bf16 values, on a stream, one thread block per block of
// values (Note [Exponent-coded weights]). Built wherever the CUDA toolkit and its compiler are (CI
// compiles it); run on the GPU host (tests/gpu/weight_decode_test.cc).
//
//   ASSIGN_OR_RETURN(weight_codec::Header h, weight_codec::ReadHeader(host_bytes));   // on the host
//   RETURN_IF_ERROR(LaunchWeightDecode(device_bytes, h, device_out, stream));
//   // or chunk by chunk, each copied into a landing buffer first (Note [Coded staging in chunks]):
//   RETURN_IF_ERROR(LaunchWeightDecodeChunk(landing, h, chunk, device_out, stream));
//
// Thread-safety: any thread; the launch is ordered on `stream` like any kernel.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/weight_codec.h"

namespace autouvm::runtime::cuda {

// Decodes the encoding at `encoded` (device memory, 16-byte aligned, `header.encoded_bytes` long; the
// header read from a copy on the host) into `out` (device memory, 16-byte aligned, header.count
// values), on `stream` (a cudaStream_t; null: the default stream). INVALID_ARGUMENT for misaligned
// pointers; INTERNAL if the launch fails. The kernel trusts the header: check it with ReadHeader.
absl::Status LaunchWeightDecode(const void* encoded, const weight_codec::Header& header, uint16_t* out, void* stream);

// Decodes one chunk of an exponent-coded encoding (weight_codec::SplitIntoChunks), gathered into
// `landing` (device memory, 16-byte aligned, as weight_codec::GatherChunk lays it out), into its
// values' places in `out` (the whole tensor: header.count values, 16-byte aligned), on `stream`.
absl::Status LaunchWeightDecodeChunk(const void* landing, const weight_codec::Header& header,
                                     const weight_codec::Chunk& chunk, uint16_t* out, void* stream);

}  // namespace autouvm::runtime::cuda
