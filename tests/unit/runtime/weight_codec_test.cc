// Exponent-coded bf16 weights (runtime/weight_codec.h, Note [Exponent-coded weights]): every encoding
// decodes to the same bits — random, Gaussian as models are initialised, every bf16 pattern, NaNs,
// infinities, subnormals, partial blocks — tensors that would not shrink are kept plain, and a damaged
// encoding is refused naming what is wrong.
#include "runtime/weight_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace autouvm::runtime::weight_codec {
namespace {

std::vector<uint16_t> Gaussian(int64_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, stddev);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = RoundToBf16(normal(rng));
  return v;
}

// Encodes, checks the header, decodes; the decoded bits.
std::vector<uint16_t> RoundTrip(const std::vector<uint16_t>& v, uint32_t block = kDefaultBlock,
                                Header* header = nullptr) {
  const std::vector<uint8_t> packed = Encode(v, block);
  absl::StatusOr<Header> h = ReadHeader(packed);
  EXPECT_TRUE(h.ok()) << h.status();
  if (!h.ok()) return {};
  EXPECT_EQ(h->count, static_cast<int64_t>(v.size()));
  EXPECT_EQ(h->encoded_bytes, static_cast<int64_t>(packed.size()));
  if (header != nullptr) *header = *h;
  std::vector<uint16_t> back(v.size(), 0xDEAD);
  const absl::Status s = Decode(packed, absl::MakeSpan(back));
  EXPECT_TRUE(s.ok()) << s;
  return back;
}

TEST(WeightCodecTest, GaussianWeightsTakeAboutElevenBitsAndDecodeBitForBit) {
  for (const float stddev : {0.02f, 1.0f / 64, 1.0f}) {
    const std::vector<uint16_t> v = Gaussian(1 << 20, stddev, 7);
    Header h;
    EXPECT_EQ(RoundTrip(v, kDefaultBlock, &h), v) << stddev;
    EXPECT_EQ(h.mode, Mode::kExponentCoded);
    EXPECT_EQ(h.index_bits, 3) << stddev;
    const double bits = 8.0 * static_cast<double>(h.encoded_bytes) / static_cast<double>(v.size());
    EXPECT_GT(bits, 11.0) << stddev;
    EXPECT_LT(bits, 11.6) << stddev;
  }
}

TEST(WeightCodecTest, EveryBf16PatternDecodesBitForBit) {
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  Header h;
  EXPECT_EQ(RoundTrip(all, kDefaultBlock, &h), all);
  EXPECT_EQ(h.mode, Mode::kPlain) << "exponents spread evenly do not shrink";
  // The same patterns inside Gaussian weights: coded, the rare exponents escaped.
  std::vector<uint16_t> mixed = Gaussian(1 << 18, 0.02f, 3);
  for (size_t i = 0; i < all.size(); i += 7) mixed[i * 4 % mixed.size()] = all[i];
  EXPECT_EQ(RoundTrip(mixed, kDefaultBlock, &h), mixed);
  EXPECT_EQ(h.mode, Mode::kExponentCoded);
  EXPECT_GT(h.escapes, 9000);
}

TEST(WeightCodecTest, SpecialValuesAndSignedZerosDecodeBitForBit) {
  std::vector<uint16_t> v = Gaussian(10000, 0.02f, 5);
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x807F, 0x0080, 0x7F7F};
  for (size_t i = 0; i < v.size(); i += 97) v[i] = specials[i % std::size(specials)];
  EXPECT_EQ(RoundTrip(v), v);
  std::vector<uint16_t> only(specials, specials + std::size(specials));
  EXPECT_EQ(RoundTrip(only), only);
}

TEST(WeightCodecTest, EmptyTinyConstantAndPartialBlocks) {
  EXPECT_EQ(RoundTrip({}), std::vector<uint16_t>{});
  EXPECT_EQ(RoundTrip({0x3F80}), std::vector<uint16_t>{0x3F80});
  Header h;
  const std::vector<uint16_t> ones(100000, 0x3F80);  // a norm's weights: one exponent
  EXPECT_EQ(RoundTrip(ones, kDefaultBlock, &h), ones);
  EXPECT_EQ(h.index_bits, 1);
  EXPECT_EQ(h.escapes, 0);
  for (const int64_t n : {63, 64, 65, 4095, 4096, 4097, 12345}) {
    for (const uint32_t block : {64u, 192u, 4096u}) {
      const std::vector<uint16_t> v = Gaussian(n, 0.05f, static_cast<uint32_t>(n));
      EXPECT_EQ(RoundTrip(v, block), v) << n << " values in blocks of " << block;
    }
  }
}

TEST(WeightCodecTest, EveryIndexWidthDecodes) {
  // Exponents over k values, evenly: the best width here is one whose table holds them all (with k = 16
  // a width of 4 and 1/16 escaped would be smaller).
  for (const int k : {1, 2, 3, 5, 7, 11, 15, 20, 31}) {
    std::vector<uint16_t> v(50000);
    std::mt19937 rng(static_cast<uint32_t>(k));
    for (auto& x : v) x = static_cast<uint16_t>(((100 + rng() % k) << 7) | (rng() & 0x807F));
    Header h;
    EXPECT_EQ(RoundTrip(v, kDefaultBlock, &h), v) << k;
    ASSERT_EQ(h.mode, Mode::kExponentCoded) << k;
    EXPECT_GE((1 << h.index_bits) - 1, k) << k;
    EXPECT_EQ(h.escapes, 0) << k;
  }
}

// The layout of docs/weight-compression.md, written here byte by byte: 3 values, b = 2, one block of 64;
// exponents 0x7F (twice: table index 0), 0x80 (index 1) and 0x01 (escaped).
TEST(WeightCodecTest, TheDocumentedLayoutDecodes) {
  std::vector<uint8_t> e(64, 0);
  const uint8_t header[] = {0x41, 0x55, 0x57, 0x43, 1, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0,
                            64,   0,    0,    0,    0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(e.data(), header, sizeof(header));
  e[32] = 0x7F;                                               // table[0]
  e[33] = 0x80;                                               // table[1]
  for (const uint8_t s : {0x00, 0x85, 0x7F}) e.push_back(s);  // signs: +0 mantissa, -5, +0x7F
  e.resize(72, 0);                                            // indices at 72: 64 x 2 bits = 16 bytes
  const uint64_t indices = 0b11'01'00;                        // 0, 1, escape
  for (int i = 0; i < 8; ++i) e.push_back(static_cast<uint8_t>(indices >> (8 * i)));
  e.resize(88, 0);
  for (const uint32_t start : {0u, 1u}) {  // escape starts
    for (int i = 0; i < 4; ++i) e.push_back(static_cast<uint8_t>(start >> (8 * i)));
  }
  e.push_back(0x01);  // the escaped exponent
  std::vector<uint16_t> out(3);
  ASSERT_TRUE(Decode(e, absl::MakeSpan(out)).ok()) << Decode(e, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0x3F80);  // 1.0
  EXPECT_EQ(out[1], 0xC005);  // -(2 + 5/64)
  EXPECT_EQ(out[2], 0x00FF);  // exponent 1, mantissa 0x7F
}

TEST(WeightCodecTest, ADamagedEncodingIsRefusedNamingWhatIsWrong) {
  const std::vector<uint16_t> v = Gaussian(10000, 0.02f, 9);
  const std::vector<uint8_t> good = Encode(v, 1024);
  std::vector<uint16_t> out(v.size());
  auto decode = [&](std::vector<uint8_t> bytes) {
    const absl::Status s = Decode(bytes, absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_NE(decode({good.begin(), good.begin() + 10}).find("shorter than its 64-byte header"), std::string::npos);
  EXPECT_NE(decode({good.begin(), good.end() - 1}).find("where its header says"), std::string::npos);
  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;
  EXPECT_NE(decode(bad).find("bad magic"), std::string::npos);
  bad = good;
  bad[4] = 9;
  EXPECT_NE(decode(bad).find("format version 9"), std::string::npos);
  bad = good;
  bad[7] = 6;
  EXPECT_NE(decode(bad).find("index width 6"), std::string::npos);
  bad = good;
  bad[16] = 65;  // a block of 1024 + 65 values
  EXPECT_NE(decode(bad).find("block of"), std::string::npos);
  // An escape moved from one block's count to the next's: its offsets no longer match its indices.
  absl::StatusOr<Header> h = ReadHeader(good);
  ASSERT_TRUE(h.ok());
  ASSERT_GT(h->escapes, 0);
  bad = good;
  uint32_t start;
  std::memcpy(&start, bad.data() + h->escape_starts_offset + 4, 4);
  ASSERT_GT(start, 0u);
  --start;
  std::memcpy(bad.data() + h->escape_starts_offset + 4, &start, 4);
  EXPECT_NE(decode(bad).find("escapes than its offsets"), std::string::npos);
  std::vector<uint16_t> small(5);
  EXPECT_EQ(Decode(good, absl::MakeSpan(small)).code(), absl::StatusCode::kInvalidArgument);
}

// Note [Coded staging in chunks]: an encoding split into chunks for a landing buffer of any size from
// one block up, each gathered and decoded on its own, decodes to the same bits; chunks cover every
// block once, in order, and none needs more landing buffer than it was given.
TEST(WeightCodecTest, ChunksDecodeOnTheirOwnBitForBit) {
  std::vector<uint16_t> v = Gaussian(100000, 0.02f, 11);
  for (size_t i = 0; i < v.size(); i += 997) v[i] = static_cast<uint16_t>(i * 40503u);  // escapes, unevenly
  for (int i = 0; i < 3000; ++i) v[50000 + static_cast<size_t>(i)] = 0x7F80;            // one exponent run
  for (const uint32_t block : {64u, 1024u, kDefaultBlock}) {
    const std::vector<uint8_t> packed = Encode(v, block);
    absl::StatusOr<Header> h = ReadHeader(packed);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(h->mode, Mode::kExponentCoded);
    for (const int64_t landing :
         {LandingBytesOfOneBlock(*h), 3 * LandingBytesOfOneBlock(*h) + 5, int64_t{40000}, int64_t{1} << 20}) {
      absl::StatusOr<std::vector<Chunk>> chunks = SplitIntoChunks(packed, *h, landing);
      ASSERT_TRUE(chunks.ok()) << chunks.status();
      std::vector<uint16_t> out(v.size(), 0xDEAD);
      int64_t next = 0, link = 0;
      for (const Chunk& c : *chunks) {
        EXPECT_EQ(c.first_block, next);
        EXPECT_GE(c.blocks, 1);
        EXPECT_LE(c.landing_bytes, landing);
        next += c.blocks;
        link += c.link_bytes();
        std::vector<uint8_t> buffer(static_cast<size_t>(landing), 0xEE);
        GatherChunk(packed, c, absl::MakeSpan(buffer));
        const absl::Status s = DecodeChunk(*h, c, buffer, absl::MakeSpan(out));
        ASSERT_TRUE(s.ok()) << s;
      }
      EXPECT_EQ(next, h->blocks());
      EXPECT_EQ(out, v) << "block " << block << ", landing " << landing;
      // What crosses the link: the encoding less its header, plus one escape start per chunk boundary.
      EXPECT_EQ(link, h->encoded_bytes - kHeaderBytes -
                          (h->escape_exponents_offset - h->escape_starts_offset - 4 * (h->blocks() + 1)) -
                          (h->indices_offset - h->signs_offset - h->count) +
                          4 * (static_cast<int64_t>(chunks->size()) - 1));
      if (landing >= (int64_t{1} << 20)) EXPECT_EQ(chunks->size(), 1u);
    }
  }
}

TEST(WeightCodecTest, ChunksRefuseWhatTheyCannotHold) {
  const std::vector<uint16_t> v = Gaussian(10000, 0.02f, 12);
  const std::vector<uint8_t> packed = Encode(v, 1024);
  absl::StatusOr<Header> h = ReadHeader(packed);
  ASSERT_TRUE(h.ok());
  absl::StatusOr<std::vector<Chunk>> small = SplitIntoChunks(packed, *h, LandingBytesOfOneBlock(*h) - 1);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("smaller than one block"), std::string::npos) << small.status();
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const std::vector<uint8_t> plain = Encode(all);
  absl::StatusOr<Header> ph = ReadHeader(plain);
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(SplitIntoChunks(plain, *ph, 1 << 20).status().code(), absl::StatusCode::kInvalidArgument);
  // A chunk whose landed escape starts were damaged in flight is refused, not decoded out of bounds.
  absl::StatusOr<std::vector<Chunk>> chunks = SplitIntoChunks(packed, *h, 1 << 20);
  ASSERT_TRUE(chunks.ok());
  const Chunk& c = chunks->front();
  std::vector<uint8_t> buffer(static_cast<size_t>(c.landing_bytes));
  GatherChunk(packed, c, absl::MakeSpan(buffer));
  const uint32_t far = 1u << 30;
  std::memcpy(buffer.data() + c.escape_starts.landing + 4, &far, 4);
  std::vector<uint16_t> out(v.size());
  EXPECT_EQ(DecodeChunk(*h, c, buffer, absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace autouvm::runtime::weight_codec
