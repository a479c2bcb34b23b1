// libFuzzer target: exponent-coded weights (runtime/weight_codec.h). An input starting with an even byte
// is an encoding to decode: refused or decoded, never a crash or a read past it. One starting with an odd
// byte is bf16 values: their encoding (in blocks of 64-256 values, as that byte says) decodes to them
// bit for bit.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/weight_codec.h"

namespace wc = autouvm::runtime::weight_codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    const absl::Span<const uint8_t> encoded(data + 1, size - 1);
    absl::StatusOr<wc::Header> h = wc::ReadHeader(encoded);
    if (!h.ok()) return 0;
    if (h->encoded_bytes != static_cast<int64_t>(encoded.size())) std::abort();
    std::vector<uint16_t> out(static_cast<size_t>(h->count));
    (void)wc::Decode(encoded, absl::MakeSpan(out));
    return 0;
  }
  std::vector<uint16_t> values((size - 1) / 2);
  if (!values.empty()) std::memcpy(values.data(), data + 1, 2 * values.size());
  const uint32_t block = 64 * (1 + (data[0] >> 1) % 4);
  const std::vector<uint8_t> encoded = wc::Encode(values, block);
  std::vector<uint16_t> back(values.size());
  if (!wc::Decode(encoded, absl::MakeSpan(back)).ok() || back != values) std::abort();
  return 0;
}
