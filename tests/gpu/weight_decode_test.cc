// The GPU decoder of exponent-coded weights (runtime/cuda/weight_decode.h) against the reference
// decoder (runtime/weight_codec.h), bit for bit, on the GPU host. Without a device the tests skip,
// saying so; the misaligned-pointer refusal runs everywhere.
#include "runtime/cuda/weight_decode.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/gpu/have_device.h"

namespace autouvm::runtime::cuda {
namespace {

namespace wc = runtime::weight_codec;

using autouvm::testing::HaveCudaDevice;

// Decodes `values`' encoding on the GPU; the values it gives back.
std::vector<uint16_t> DecodeOnGpu(const std::vector<uint16_t>& values, uint32_t block) {
  const std::vector<uint8_t> packed = wc::Encode(values, block);
  const absl::StatusOr<wc::Header> h = wc::ReadHeader(packed);
  EXPECT_TRUE(h.ok()) << h.status();
  void* in = nullptr;
  void* out = nullptr;
  EXPECT_EQ(cudaMalloc(&in, packed.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&out, 2 * values.size() + 16), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(in, packed.data(), packed.size(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(out, 0xAB, 2 * values.size() + 16), cudaSuccess);
  const absl::Status s = LaunchWeightDecode(in, *h, static_cast<uint16_t*>(out), nullptr);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<uint16_t> back(values.size() + 8);
  EXPECT_EQ(cudaMemcpy(back.data(), out, 2 * back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(in);
  cudaFree(out);
  for (size_t i = values.size(); i < back.size(); ++i) EXPECT_EQ(back[i], 0xABAB) << "wrote past its count at " << i;
  back.resize(values.size());
  return back;
}

TEST(WeightDecodeTest, MisalignedPointersAreRefused) {
  wc::Header h;
  h.count = 1;
  EXPECT_EQ(
      LaunchWeightDecode(reinterpret_cast<const void*>(0x1008), h, reinterpret_cast<uint16_t*>(0x2000), nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      LaunchWeightDecode(reinterpret_cast<const void*>(0x1000), h, reinterpret_cast<uint16_t*>(0x2008), nullptr).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(WeightDecodeTest, AChunkOutsideItsEncodingIsRefused) {
  const std::vector<uint16_t> v(10000, 0x3C00);
  const std::vector<uint8_t> packed = wc::Encode(v, 1024);
  const absl::StatusOr<wc::Header> h = wc::ReadHeader(packed);
  ASSERT_TRUE(h.ok());
  wc::Chunk c;
  c.first_block = h->blocks() - 1;
  c.blocks = 2;
  EXPECT_EQ(LaunchWeightDecodeChunk(reinterpret_cast<const void*>(0x1000), *h, c, reinterpret_cast<uint16_t*>(0x2000),
                                    nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  c.blocks = 1;
  EXPECT_EQ(LaunchWeightDecodeChunk(reinterpret_cast<const void*>(0x1008), *h, c, reinterpret_cast<uint16_t*>(0x2000),
                                    nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Note [Coded staging in chunks]: every chunk copied into one landing buffer in turn and decoded from
// there, as CudaBackend::StageInto does, gives the tensor back bit for bit.
TEST(WeightDecodeTest, ChunksThroughALandingBufferDecodeAsTheReferenceDoes) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device: the GPU decoder runs on the GPU host";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<uint16_t> v((1 << 21) + 77);
  for (auto& x : v) x = wc::RoundToBf16(normal(rng));
  for (size_t i = 0; i < 50000; ++i) v[1000000 + i] = static_cast<uint16_t>(rng());  // a run of escapes
  const std::vector<uint8_t> packed = wc::Encode(v);
  const absl::StatusOr<wc::Header> h = wc::ReadHeader(packed);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->mode, wc::Mode::kExponentCoded);
  void* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, packed.size()), cudaSuccess);
  std::memcpy(host, packed.data(), packed.size());
  for (const int64_t landing_bytes : {wc::LandingBytesOfOneBlock(*h), int64_t{300000}, int64_t{4} << 20}) {
    const absl::StatusOr<std::vector<wc::Chunk>> chunks = wc::SplitIntoChunks(packed, *h, landing_bytes);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    void* landing = nullptr;
    void* out = nullptr;
    ASSERT_EQ(cudaMalloc(&landing, static_cast<size_t>(landing_bytes)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, 2 * v.size()), cudaSuccess);
    ASSERT_EQ(cudaMemset(out, 0xAB, 2 * v.size()), cudaSuccess);
    for (const wc::Chunk& c : *chunks) {
      for (const wc::Chunk::Piece* p : {&c.signs, &c.indices, &c.escape_starts, &c.escape_exponents}) {
        if (p->bytes == 0) continue;
        ASSERT_EQ(cudaMemcpyAsync(static_cast<uint8_t*>(landing) + p->landing, static_cast<uint8_t*>(host) + p->offset,
                                  static_cast<size_t>(p->bytes), cudaMemcpyHostToDevice, nullptr),
                  cudaSuccess);
      }
      const absl::Status s = LaunchWeightDecodeChunk(landing, *h, c, static_cast<uint16_t*>(out), nullptr);
      ASSERT_TRUE(s.ok()) << s;
    }
    std::vector<uint16_t> back(v.size());
    ASSERT_EQ(cudaMemcpy(back.data(), out, 2 * back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, v) << chunks->size() << " chunks in a landing buffer of " << landing_bytes << " bytes";
    cudaFree(landing);
    cudaFree(out);
  }
  cudaFreeHost(host);
}

TEST(WeightDecodeTest, GaussianAndSpecialValuesDecodeAsTheReferenceDoes) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device: the GPU decoder runs on the GPU host";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 0.02f);
  const uint16_t specials[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x807F, 0x7F7F};
  for (const int64_t n : {int64_t{1}, int64_t{63}, int64_t{4097}, int64_t{1} << 22}) {
    for (const uint32_t block : {64u, 192u, 4096u, 8192u}) {
      std::vector<uint16_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = wc::RoundToBf16(normal(rng));
      for (size_t i = 0; i < v.size(); i += 101) v[i] = specials[i % std::size(specials)];
      EXPECT_EQ(DecodeOnGpu(v, block), v) << n << " values in blocks of " << block;
    }
  }
}

TEST(WeightDecodeTest, EveryIndexWidthAndPlainTensorsDecode) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device: the GPU decoder runs on the GPU host";
  std::mt19937 rng(5);
  for (const int k : {1, 2, 3, 5, 7, 11, 15, 20, 31, 256}) {
    std::vector<uint16_t> v(100000);
    for (auto& x : v) x = static_cast<uint16_t>((((k == 256 ? 0 : 100) + rng() % k) << 7) | (rng() & 0x807F));
    EXPECT_EQ(DecodeOnGpu(v, wc::kDefaultBlock), v) << k << " exponents";
  }
}

}  // namespace
}  // namespace autouvm::runtime::cuda
