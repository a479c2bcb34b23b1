// Checksummed values: what is sealed opens again; anything altered is DATA_LOSS, never a profile.
#include "profiler/profile_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autouvm/v1/profile.pb.h"

namespace autouvm::profiler {
namespace {

using ::testing::HasSubstr;

autouvm::v1::Profile Sample() {
  autouvm::v1::Profile p;
  p.mutable_key()->set_gpu("h200-pcie5");
  p.set_iteration_seconds(0.0125);
  p.set_link_bound_ops(7);
  auto* op = p.mutable_trace()->add_ops();
  op->set_kernel("aten::mm#0");
  return p;
}

TEST(ProfileCodecTest, ASealedProfileOpensUnchanged) {
  const std::string value = SealValue(Sample());
  auto back = OpenValue<autouvm::v1::Profile>(value, "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), Sample().SerializeAsString());
}

TEST(ProfileCodecTest, EveryFlippedByteAndEveryTruncationIsDetected) {
  const std::string value = SealValue(Sample());
  for (size_t i = 0; i < value.size(); ++i) {
    std::string bad = value;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto opened = OpenValue<autouvm::v1::Profile>(bad, "key k");
    if (opened.ok()) {
      // A flip inside a protobuf tag can leave a message that parses to the same fields; never to others.
      EXPECT_EQ(opened->SerializeAsString(), Sample().SerializeAsString()) << "byte " << i;
      continue;
    }
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_THAT(opened.status().message(), HasSubstr("key k"));
  }
  for (size_t n = 0; n < value.size(); ++n) {
    auto opened = OpenValue<autouvm::v1::Profile>(value.substr(0, n), "key k");
    EXPECT_FALSE(opened.ok()) << "truncated to " << n;
  }
  EXPECT_EQ(OpenValue<autouvm::v1::Profile>("garbage \xff", "x").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace autouvm::profiler
