// libFuzzer target: exponent-coded weights (runtime/weight_codec.h). An input starting with an even byte
// is an encoding to decode, whole and chunk by chunk through a landing buffer (Note [Coded staging in
// chunks]): refused or decoded, never a crash or a read past it. One starting with an odd byte is bf16
// values: their encoding (in blocks of 64-256 values, as that byte says) decodes to them bit for bit,
// whole and chunk by chunk.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/weight_codec.h"

namespace wc = autouvm::runtime::weight_codec;

// Decodes `encoded` chunk by chunk through a landing buffer of 1-5 blocks' room (`pick`); whether every
// chunk decoded.
bool DecodeInChunks(absl::Span<const uint8_t> encoded, const wc::Header& h, uint8_t pick, std::vector<uint16_t>* out) {
  if (h.mode != wc::Mode::kExponentCoded) return true;
  const int64_t landing = wc::LandingBytesOfOneBlock(h) * (1 + pick % 5);
  absl::StatusOr<std::vector<wc::Chunk>> chunks = wc::SplitIntoChunks(encoded, h, landing);
  if (!chunks.ok()) std::abort();  // a header ReadHeader accepted always splits
  std::vector<uint8_t> buffer(static_cast<size_t>(landing));
  bool ok = true;
  for (const wc::Chunk& c : *chunks) {
    if (c.landing_bytes > landing) std::abort();
    wc::GatherChunk(encoded, c, absl::MakeSpan(buffer));
    ok = wc::DecodeChunk(h, c, buffer, absl::MakeSpan(*out)).ok() && ok;
  }
  return ok;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    const absl::Span<const uint8_t> encoded(data + 1, size - 1);
    absl::StatusOr<wc::Header> h = wc::ReadHeader(encoded);
    if (!h.ok()) return 0;
    if (h->encoded_bytes != static_cast<int64_t>(encoded.size())) std::abort();
    std::vector<uint16_t> out(static_cast<size_t>(h->count));
    const bool whole = wc::Decode(encoded, absl::MakeSpan(out)).ok();
    std::vector<uint16_t> chunked(out.size());
    const bool in_chunks = DecodeInChunks(encoded, *h, data[0] >> 1, &chunked);
    // What decodes whole decodes the same in chunks. A plain encoding has no chunks: DecodeInChunks leaves
    // `chunked` as it was, so only an exponent-coded one is compared (a plain one of a value other than 0
    // aborted here: corpus/weight_codec/plain-one-value).
    if (whole && (!in_chunks || (h->mode == wc::Mode::kExponentCoded && chunked != out))) std::abort();
    return 0;
  }
  std::vector<uint16_t> values((size - 1) / 2);
  if (!values.empty()) std::memcpy(values.data(), data + 1, 2 * values.size());
  const uint32_t block = 64 * (1 + (data[0] >> 1) % 4);
  const std::vector<uint8_t> encoded = wc::Encode(values, block);
  std::vector<uint16_t> back(values.size());
  if (!wc::Decode(encoded, absl::MakeSpan(back)).ok() || back != values) std::abort();
  std::vector<uint16_t> chunked(values.size());
  if (!DecodeInChunks(encoded, *wc::ReadHeader(encoded), data[0] >> 3, &chunked)) std::abort();
  if (wc::ReadHeader(encoded)->mode == wc::Mode::kExponentCoded && chunked != values) std::abort();
  return 0;
}
