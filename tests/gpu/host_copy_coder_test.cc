// HostCopyCoder (runtime/cuda/host_copy_coder.h, Note [Coded host copies]): its threads encode what is
// queued, a copy that does not shrink comes back plain, Forget drops a job whether it is queued, being
// encoded or done, and the coder stops with work still queued. Runs everywhere: without a device the
// coded copy cannot be pinned, and the result says so instead.
#include "runtime/cuda/host_copy_coder.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/weight_codec.h"
#include "tests/gpu/have_device.h"

namespace autouvm::runtime::cuda {
namespace {

namespace wc = runtime::weight_codec;

using autouvm::testing::HaveCudaDevice;

std::vector<uint16_t> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = wc::RoundToBf16(normal(rng));
  return v;
}

TEST(HostCopyCoderTest, CodesWhatShrinksAndKeepsTheRestPlain) {
  const std::vector<uint16_t> weights = Gaussian(1 << 20, 3);
  std::vector<uint16_t> spread(1 << 16);
  for (size_t i = 0; i < spread.size(); ++i) spread[i] = static_cast<uint16_t>(i);
  HostCopyCoder coder(2);
  EXPECT_FALSE(coder.Take(1).has_value()) << "nothing was added";
  coder.Add(1, weights.data(), 2 * static_cast<int64_t>(weights.size()));
  coder.Add(2, spread.data(), 2 * static_cast<int64_t>(spread.size()));
  coder.WaitIdle();
  std::optional<HostCopyCoder::Coded> w = coder.Take(1);
  ASSERT_TRUE(w.has_value());
  EXPECT_FALSE(coder.Take(1).has_value()) << "taken once";
  if (HaveCudaDevice()) {
    ASSERT_NE(w->memory.ptr, nullptr) << w->error;
    EXPECT_LT(w->bytes, static_cast<int64_t>(0.75 * 2 * static_cast<double>(weights.size())));
    std::vector<uint16_t> back(weights.size());
    const absl::Status s =
        wc::Decode(absl::MakeConstSpan(static_cast<const uint8_t*>(w->memory.ptr), static_cast<size_t>(w->bytes)),
                   absl::MakeSpan(back));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(back, weights);
    FreePinnedHost(w->memory.ptr, w->memory.mapped);
  } else {
    EXPECT_EQ(w->memory.ptr, nullptr);
    EXPECT_NE(w->error.find("cudaHostRegister"), std::string::npos) << w->error;
  }
  std::optional<HostCopyCoder::Coded> p = coder.Take(2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->memory.ptr, nullptr) << "exponents spread evenly do not shrink";
  EXPECT_TRUE(p->error.empty()) << p->error;
}

TEST(HostCopyCoderTest, ForgetDropsAJobWhereverItIsAndStoppingLeavesNothing) {
  const std::vector<uint16_t> weights = Gaussian(1 << 22, 4);  // 8 MiB: long enough to be caught encoding
  const int64_t bytes = 2 * static_cast<int64_t>(weights.size());
  {
    HostCopyCoder coder(1);
    for (uint64_t addr = 1; addr <= 6; ++addr) coder.Add(addr, weights.data(), bytes);
    coder.Forget(1);  // being encoded, most likely: waited for
    coder.Forget(6);  // queued
    coder.WaitIdle();
    EXPECT_FALSE(coder.Take(1).has_value());
    EXPECT_FALSE(coder.Take(6).has_value());
    coder.Forget(2);  // done
    EXPECT_FALSE(coder.Take(2).has_value());
    for (uint64_t addr : {3, 4}) {
      std::optional<HostCopyCoder::Coded> c = coder.Take(addr);
      ASSERT_TRUE(c.has_value()) << addr;
      if (c->memory.ptr != nullptr) FreePinnedHost(c->memory.ptr, c->memory.mapped);
    }
    // 5 is left done and not taken; more is queued as the coder goes (ASan: nothing leaks).
    for (uint64_t addr = 7; addr <= 9; ++addr) coder.Add(addr, weights.data(), bytes);
  }
}

}  // namespace
}  // namespace autouvm::runtime::cuda
