// Exponent-coded bf16 weights: a lossless form for weights that stream over the CPU-GPU link, fewer
// bytes to move for the same bits on the device (Note [Exponent-coded weights], weight_codec.cc; the
// format: docs/weight-compression.md). This is the reference encoder and decoder; a GPU decoder expands
// the same bytes.
//
//   std::vector<uint8_t> packed = weight_codec::Encode(bf16_bits);          // plain if it would not shrink
//   ASSIGN_OR_RETURN(weight_codec::Header h, weight_codec::ReadHeader(packed));
//   std::vector<uint16_t> back(h.count);
//   RETURN_IF_ERROR(weight_codec::Decode(packed, absl::MakeSpan(back)));    // back == bf16_bits, bit for bit
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace autouvm::runtime::weight_codec {

inline constexpr uint32_t kMagic = 0x43575541;  // "AUWC", little-endian
inline constexpr uint16_t kVersion = 1;
inline constexpr uint32_t kDefaultBlock = 4096;  // values per block
inline constexpr int kMaxIndexBits = 5;
inline constexpr int64_t kHeaderBytes = 64;  // the fixed header and the exponent table
// What the planner takes streamed weights to code to before any is coded: the ratio of Gaussian bf16
// weights (0.70 of their bytes; bench/results/2026-12-03-weight-codec-cpu.md).
inline constexpr double kPlannedCodedRatio = 0.70;

enum class Mode : uint8_t { kPlain = 0, kExponentCoded = 1 };

struct Header {
  Mode mode = Mode::kPlain;
  int index_bits = 0;  // b: indices of b bits; 2^b - 1 table entries, the last index escapes
  int64_t count = 0;   // bf16 values
  uint32_t block = 0;  // values per block (a multiple of 64), exponent-coded only
  int64_t escapes = 0;
  uint8_t table[31] = {};  // the exponents of indices 0 .. 2^b - 2, most frequent first
  // Where each section starts in the encoded bytes, and its length (exponent-coded only).
  int64_t signs_offset = 0, indices_offset = 0, escape_starts_offset = 0, escape_exponents_offset = 0;
  int64_t blocks() const { return block == 0 ? 0 : (count + block - 1) / block; }
  int64_t index_bytes_per_block() const { return static_cast<int64_t>(block) * index_bits / 8; }
  int64_t encoded_bytes = 0;  // the whole encoding
};

// The encoding of `bf16` (raw bits): exponent-coded with the index width that makes it smallest, or
// plain (a header and the raw values) when that is not smaller. `block` must be a positive multiple of 64.
std::vector<uint8_t> Encode(absl::Span<const uint16_t> bf16, uint32_t block = kDefaultBlock);
// What an encoding says of itself, its sizes checked against its length: INVALID_ARGUMENT naming what
// is wrong (truncated, a bad magic or version, an impossible index width or block, escape counts that
// do not add up).
absl::StatusOr<Header> ReadHeader(absl::Span<const uint8_t> encoded);
// Decodes into `out`, which must hold exactly the header's count; INVALID_ARGUMENT for an encoding
// ReadHeader refuses or whose escapes do not match its indices.
absl::Status Decode(absl::Span<const uint8_t> encoded, absl::Span<uint16_t> out);

// `f` rounded to bf16 (to nearest, ties to even, as libtorch converts), as raw bits.
inline uint16_t RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// The size an exponent-coded encoding of values with these exponent counts would take with index width
// `bits` (what Encode compares), for the planner's and the benchmarks' use.
int64_t CodedBytes(const int64_t (&exponent_counts)[256], int64_t count, int bits, uint32_t block = kDefaultBlock);

// Note [Coded staging in chunks]: a run of whole blocks of an exponent-coded encoding that can be
// copied and decoded on its own — the unit in which a coded host copy crosses the link into a small
// landing buffer on the device and is decoded from there into the tensor's place (runtime/cuda/).
// Its four pieces (the blocks' signs, indices, escape starts and escape exponents) lie apart in the
// encoding; in the landing buffer they lie one after another, each at a multiple of 8 bytes.
struct Chunk {
  struct Piece {
    int64_t offset = 0;  // in the encoding
    int64_t bytes = 0;
    int64_t landing = 0;  // in the landing buffer
  };
  int64_t first_block = 0, blocks = 0;
  uint32_t escape_base = 0;  // the escapes before the chunk: where its escape exponents begin
  Piece signs, indices, escape_starts, escape_exponents;
  int64_t landing_bytes = 0;  // the landing buffer it needs
  int64_t link_bytes() const { return signs.bytes + indices.bytes + escape_starts.bytes + escape_exponents.bytes; }
};
// The chunks of an exponent-coded encoding (its header read by ReadHeader) that each need at most
// `max_landing_bytes` of landing buffer, in order, covering every block once; at least one block per
// chunk, so INVALID_ARGUMENT if one block does not fit (or for a plain encoding).
absl::StatusOr<std::vector<Chunk>> SplitIntoChunks(absl::Span<const uint8_t> encoded, const Header& header,
                                                   int64_t max_landing_bytes);
// The landing buffer bytes the largest block of this encoding needs: the least max_landing_bytes.
int64_t LandingBytesOfOneBlock(const Header& header);
// Copies a chunk's pieces from the encoding into `landing` (landing_bytes long), as the link would.
void GatherChunk(absl::Span<const uint8_t> encoded, const Chunk& chunk, absl::Span<uint8_t> landing);
// The reference decode of one chunk from its landing buffer into its values' places in `out` (all of
// the header's count): what the GPU decoder does with a chunk. INVALID_ARGUMENT where the escapes do
// not add up.
absl::Status DecodeChunk(const Header& header, const Chunk& chunk, absl::Span<const uint8_t> landing,
                         absl::Span<uint16_t> out);

}  // namespace autouvm::runtime::weight_codec
