#include "runtime/weight_codec.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace autouvm::runtime::weight_codec {
// Note [Exponent-coded weights]: under a budget every step moves the streamed weights over the link,
// and at 93-97% of the link's floor the only way left to a faster step is fewer bytes (issue 30). A bf16
// weight is a sign, an 8-bit exponent and a 7-bit mantissa. Sign and mantissa of trained or initialised
// weights are close to random, but the exponents are not: a weight drawn from N(0, s^2) has its exponent
// at floor(log2 s) or the few below it nearly always, each lower one about half as often as the one above.
// So the sign and mantissa stay as they are, one byte per weight, and the exponent becomes a b-bit index
// into a table of the tensor's 2^b - 1 most frequent exponents; the last index escapes to the exponent
// itself, kept in a list of its own. b is chosen per tensor (1-5) for the smallest encoding, usually 3:
// about 11.2 bits a weight for Gaussian weights. Every value decodes on its own: the indices have a fixed
// width, and the escapes of each block of `block` values start at an offset the encoding lists, so a GPU
// decodes a block per thread block with no dependence between blocks (an escape's place within its block
// is the count of escape indices before it, a prefix sum). Nothing is lost: NaNs, infinities, zeros and
// subnormals are exponents like any other (0 and 255), and a tensor the code would not shrink (exponents
// spread evenly) is kept plain. The layout, byte by byte, is docs/weight-compression.md.
namespace {

constexpr int64_t Align8(int64_t n) { return (n + 7) & ~int64_t{7}; }

template <typename T>
void Put(std::vector<uint8_t>& out, int64_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T>
T Get(absl::Span<const uint8_t> in, int64_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

// The sections of an exponent-coded encoding of `count` values; returns the total size.
int64_t Layout(Header* h) {
  h->signs_offset = kHeaderBytes;
  h->indices_offset = Align8(h->signs_offset + h->count);
  h->escape_starts_offset = h->indices_offset + h->blocks() * h->index_bytes_per_block();
  h->escape_exponents_offset = h->escape_starts_offset + 4 * (h->blocks() + 1);
  h->encoded_bytes = h->escape_exponents_offset + h->escapes;
  return h->encoded_bytes;
}

void WriteHeader(const Header& h, std::vector<uint8_t>& out) {
  Put<uint32_t>(out, 0, kMagic);
  Put<uint16_t>(out, 4, kVersion);
  out[6] = static_cast<uint8_t>(h.mode);
  out[7] = static_cast<uint8_t>(h.index_bits);
  Put<uint64_t>(out, 8, static_cast<uint64_t>(h.count));
  Put<uint32_t>(out, 16, h.block);
  Put<uint64_t>(out, 24, static_cast<uint64_t>(h.escapes));
  std::memcpy(out.data() + 32, h.table, sizeof(h.table));
}

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("compressed weight: ", what));
}

}  // namespace

int64_t CodedBytes(const int64_t (&exponent_counts)[256], int64_t count, int bits, uint32_t block) {
  std::array<int64_t, 256> sorted;
  std::copy(std::begin(exponent_counts), std::end(exponent_counts), sorted.begin());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const int entries = (1 << bits) - 1;
  const int64_t covered = std::accumulate(sorted.begin(), sorted.begin() + entries, int64_t{0});
  Header h;
  h.mode = Mode::kExponentCoded;
  h.index_bits = bits;
  h.count = count;
  h.block = block;
  h.escapes = count - covered;
  return Layout(&h);
}

std::vector<uint8_t> Encode(absl::Span<const uint16_t> bf16, uint32_t block) {
  Header h;
  h.count = static_cast<int64_t>(bf16.size());
  int64_t counts[256] = {};
  for (const uint16_t v : bf16) ++counts[(v >> 7) & 0xFF];
  int64_t best = kHeaderBytes + 2 * h.count;  // plain
  for (int bits = 1; bits <= kMaxIndexBits && h.count > 0; ++bits) {
    if (const int64_t size = CodedBytes(counts, h.count, bits, block); size < best) {
      best = size;
      h.index_bits = bits;
    }
  }
  if (h.index_bits == 0) {
    std::vector<uint8_t> out(static_cast<size_t>(best), 0);
    WriteHeader(h, out);
    if (h.count > 0) std::memcpy(out.data() + kHeaderBytes, bf16.data(), 2 * bf16.size());
    return out;
  }

  h.mode = Mode::kExponentCoded;
  h.block = block;
  // The table: the most frequent exponents, ties to the lower exponent.
  std::array<int, 256> order;
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return counts[a] > counts[b]; });
  const int entries = (1 << h.index_bits) - 1;
  const uint8_t escape = static_cast<uint8_t>(entries);
  std::array<uint8_t, 256> index_of;
  index_of.fill(escape);
  for (int i = 0; i < entries; ++i) {
    h.table[i] = static_cast<uint8_t>(order[i]);
    index_of[order[i]] = static_cast<uint8_t>(i);
  }
  int64_t covered = 0;
  for (int i = 0; i < entries; ++i) covered += counts[order[i]];
  h.escapes = h.count - covered;
  std::vector<uint8_t> out(static_cast<size_t>(Layout(&h)), 0);
  WriteHeader(h, out);

  uint8_t* signs = out.data() + h.signs_offset;
  uint8_t* escaped = out.data() + h.escape_exponents_offset;
  int64_t escapes = 0;
  const int bits = h.index_bits;
  for (int64_t b = 0; b < h.blocks(); ++b) {
    Put<uint32_t>(out, h.escape_starts_offset + 4 * b, static_cast<uint32_t>(escapes));
    uint8_t* words = out.data() + h.indices_offset + b * h.index_bytes_per_block();
    uint64_t acc = 0;
    int filled = 0;
    int64_t word = 0;
    const int64_t begin = b * block;
    for (int64_t i = begin; i < begin + static_cast<int64_t>(block); ++i) {
      uint64_t index = 0;  // past the last value: index 0, never decoded
      if (i < h.count) {
        const uint16_t v = bf16[static_cast<size_t>(i)];
        signs[i] = static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7F));
        const uint8_t exponent = static_cast<uint8_t>((v >> 7) & 0xFF);
        index = index_of[exponent];
        if (index == escape) escaped[escapes++] = exponent;
      }
      acc |= index << filled;
      filled += bits;
      if (filled >= 64) {
        std::memcpy(words + 8 * word++, &acc, 8);
        filled -= 64;
        acc = filled > 0 ? index >> (bits - filled) : 0;
      }
    }
  }
  Put<uint32_t>(out, h.escape_starts_offset + 4 * h.blocks(), static_cast<uint32_t>(escapes));
  return out;
}

absl::StatusOr<Header> ReadHeader(absl::Span<const uint8_t> in) {
  if (static_cast<int64_t>(in.size()) < kHeaderBytes) {
    return Invalid(absl::StrCat(in.size(), " bytes, shorter than its ", kHeaderBytes, "-byte header"));
  }
  if (Get<uint32_t>(in, 0) != kMagic) return Invalid("not an exponent-coded weight (bad magic)");
  if (const uint16_t v = Get<uint16_t>(in, 4); v != kVersion) {
    return Invalid(absl::StrCat("format version ", v, ", this build reads ", kVersion));
  }
  Header h;
  const uint8_t mode = in[6];
  if (mode > static_cast<uint8_t>(Mode::kExponentCoded)) return Invalid(absl::StrCat("unknown mode ", mode));
  h.mode = static_cast<Mode>(mode);
  h.index_bits = in[7];
  const uint64_t count = Get<uint64_t>(in, 8);
  if (count > (uint64_t{1} << 40)) return Invalid(absl::StrCat("a count of ", count, " values"));
  h.count = static_cast<int64_t>(count);
  h.block = Get<uint32_t>(in, 16);
  const uint64_t escapes = Get<uint64_t>(in, 24);
  std::memcpy(h.table, in.data() + 32, sizeof(h.table));
  if (h.mode == Mode::kPlain) {
    if (h.index_bits != 0 || h.block != 0 || escapes != 0) return Invalid("a plain encoding with index fields set");
    h.encoded_bytes = kHeaderBytes + 2 * h.count;
  } else {
    if (h.index_bits < 1 || h.index_bits > kMaxIndexBits) {
      return Invalid(absl::StrCat("index width ", h.index_bits, " (1-", kMaxIndexBits, ")"));
    }
    if (h.block == 0 || h.block % 64 != 0) return Invalid(absl::StrCat("block of ", h.block, " values"));
    if (escapes > count) return Invalid(absl::StrCat(escapes, " escapes for ", count, " values"));
    h.escapes = static_cast<int64_t>(escapes);
    Layout(&h);
  }
  if (static_cast<int64_t>(in.size()) != h.encoded_bytes) {
    return Invalid(absl::StrCat(in.size(), " bytes where its header says ", h.encoded_bytes));
  }
  if (h.mode == Mode::kExponentCoded) {
    uint32_t last = 0;
    for (int64_t b = 0; b <= h.blocks(); ++b) {
      const uint32_t start = Get<uint32_t>(in, h.escape_starts_offset + 4 * b);
      if (start < last || (b == 0 && start != 0) || (b == h.blocks() && start != h.escapes)) {
        return Invalid(absl::StrCat("escape offsets out of order at block ", b));
      }
      last = start;
    }
  }
  return h;
}

namespace {

// Block b of an exponent-coded encoding: its values from `signs` (the block's first), its index
// stream `words` and its `escapes` escape exponents `escaped`, into `out` (the block's first value).
absl::Status DecodeBlock(const Header& h, int64_t b, const uint8_t* signs, const uint8_t* words, const uint8_t* escaped,
                         int64_t escapes, uint16_t* out) {
  const int bits = h.index_bits;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  const uint64_t escape = mask;
  const int64_t values = std::min<int64_t>(h.block, h.count - b * h.block);
  int64_t next_escape = 0;
  for (int64_t j = 0; j < values; ++j) {
    const int64_t bit = j * bits;
    uint64_t lo;
    std::memcpy(&lo, words + 8 * (bit / 64), 8);
    uint64_t index = lo >> (bit % 64);
    if (bit % 64 + bits > 64) {
      uint64_t hi;
      std::memcpy(&hi, words + 8 * (bit / 64 + 1), 8);
      index |= hi << (64 - bit % 64);
    }
    index &= mask;
    uint8_t exponent;
    if (index == escape) {
      if (next_escape >= escapes) return Invalid(absl::StrCat("block ", b, " has more escapes than its offsets"));
      exponent = escaped[next_escape++];
    } else {
      exponent = h.table[index];
    }
    const uint8_t s = signs[j];
    out[j] = static_cast<uint16_t>(((s & 0x80) << 8) | (exponent << 7) | (s & 0x7F));
  }
  if (next_escape != escapes) return Invalid(absl::StrCat("block ", b, " has fewer escapes than its offsets"));
  return absl::OkStatus();
}

uint32_t EscapeStart(const uint8_t* starts, int64_t i) {
  uint32_t v;
  std::memcpy(&v, starts + 4 * i, 4);
  return v;
}

}  // namespace

absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint16_t> out) {
  absl::StatusOr<Header> read = ReadHeader(in);
  if (!read.ok()) return read.status();
  const Header& h = *read;
  if (static_cast<int64_t>(out.size()) != h.count) {
    return Invalid(absl::StrCat(h.count, " values, decoded into room for ", out.size()));
  }
  if (h.mode == Mode::kPlain) {
    if (h.count > 0) std::memcpy(out.data(), in.data() + kHeaderBytes, 2 * out.size());
    return absl::OkStatus();
  }
  const uint8_t* starts = in.data() + h.escape_starts_offset;
  for (int64_t b = 0; b < h.blocks(); ++b) {
    const uint32_t first = EscapeStart(starts, b);
    RETURN_IF_ERROR(DecodeBlock(
        h, b, in.data() + h.signs_offset + b * h.block, in.data() + h.indices_offset + b * h.index_bytes_per_block(),
        in.data() + h.escape_exponents_offset + first, EscapeStart(starts, b + 1) - first, out.data() + b * h.block));
  }
  return absl::OkStatus();
}

// A block's signs and indices, all of its values escaped, two escape starts and the alignment slack:
// n blocks never need more than n times this.
int64_t LandingBytesOfOneBlock(const Header& h) { return 2 * int64_t{h.block} + h.index_bytes_per_block() + 32; }

absl::StatusOr<std::vector<Chunk>> SplitIntoChunks(absl::Span<const uint8_t> encoded, const Header& h,
                                                   int64_t max_landing_bytes) {
  if (h.mode != Mode::kExponentCoded) return Invalid("a plain encoding has no chunks");
  if (static_cast<int64_t>(encoded.size()) != h.encoded_bytes) {
    return Invalid(absl::StrCat(encoded.size(), " bytes where its header says ", h.encoded_bytes));
  }
  if (max_landing_bytes < LandingBytesOfOneBlock(h)) {
    return Invalid(absl::StrCat("a landing buffer of ", max_landing_bytes, " bytes is smaller than one block's ",
                                LandingBytesOfOneBlock(h)));
  }
  const uint8_t* starts = encoded.data() + h.escape_starts_offset;
  auto make = [&](int64_t first, int64_t blocks) {
    Chunk c;
    c.first_block = first;
    c.blocks = blocks;
    c.escape_base = EscapeStart(starts, first);
    const int64_t first_value = first * h.block;
    c.signs = {h.signs_offset + first_value, std::min<int64_t>(blocks * h.block, h.count - first_value), 0};
    c.indices = {h.indices_offset + first * h.index_bytes_per_block(), blocks * h.index_bytes_per_block(),
                 Align8(c.signs.bytes)};
    c.escape_starts = {h.escape_starts_offset + 4 * first, 4 * (blocks + 1), c.indices.landing + c.indices.bytes};
    c.escape_exponents = {h.escape_exponents_offset + c.escape_base,
                          EscapeStart(starts, first + blocks) - c.escape_base,
                          Align8(c.escape_starts.landing + c.escape_starts.bytes)};
    c.landing_bytes = Align8(c.escape_exponents.landing + c.escape_exponents.bytes);
    return c;
  };
  std::vector<Chunk> chunks;
  for (int64_t first = 0; first < h.blocks();) {
    // As many blocks as fit with every value escaped, then more while the escapes leave room.
    int64_t blocks = std::max<int64_t>(1, std::min(h.blocks() - first, max_landing_bytes / LandingBytesOfOneBlock(h)));
    Chunk c = make(first, blocks);
    for (int64_t more = h.blocks() - first - blocks; more > 0;) {  // fill what the escapes left free
      const int64_t step =
          std::min(more, std::max<int64_t>(1, (max_landing_bytes - c.landing_bytes) / LandingBytesOfOneBlock(h)));
      Chunk bigger = make(first, c.blocks + step);
      if (bigger.landing_bytes > max_landing_bytes) break;
      c = bigger;
      more -= step;
    }
    chunks.push_back(c);
    first += c.blocks;
  }
  return chunks;
}

void GatherChunk(absl::Span<const uint8_t> encoded, const Chunk& c, absl::Span<uint8_t> landing) {
  for (const Chunk::Piece* p : {&c.signs, &c.indices, &c.escape_starts, &c.escape_exponents}) {
    if (p->bytes > 0)
      std::memcpy(landing.data() + p->landing, encoded.data() + p->offset, static_cast<size_t>(p->bytes));
  }
}

absl::Status DecodeChunk(const Header& h, const Chunk& c, absl::Span<const uint8_t> landing, absl::Span<uint16_t> out) {
  if (static_cast<int64_t>(out.size()) != h.count) {
    return Invalid(absl::StrCat(h.count, " values, decoded into room for ", out.size()));
  }
  if (static_cast<int64_t>(landing.size()) < c.landing_bytes) {
    return Invalid(absl::StrCat("a chunk of ", c.landing_bytes, " bytes in a landing buffer of ", landing.size()));
  }
  const uint8_t* starts = landing.data() + c.escape_starts.landing;
  for (int64_t k = 0; k < c.blocks; ++k) {
    const uint32_t first = EscapeStart(starts, k), last = EscapeStart(starts, k + 1);
    if (first < c.escape_base || last < first || last - c.escape_base > c.escape_exponents.bytes) {
      return Invalid(absl::StrCat("block ", c.first_block + k, "'s escapes lie outside its chunk"));
    }
    const int64_t b = c.first_block + k;
    RETURN_IF_ERROR(DecodeBlock(h, b, landing.data() + c.signs.landing + k * h.block,
                                landing.data() + c.indices.landing + k * h.index_bytes_per_block(),
                                landing.data() + c.escape_exponents.landing + (first - c.escape_base), last - first,
                                out.data() + b * h.block));
  }
  return absl::OkStatus();
}

}  // namespace autouvm::runtime::weight_codec
