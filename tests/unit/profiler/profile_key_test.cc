// Profile keys: shape buckets, the store encoding and its parser, the model digest.
#include "profiler/profile_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "profiler/profile_store.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::profiler {
namespace {

using ::testing::HasSubstr;

const std::string kDigest(64, 'a');

TEST(ProfileKeyTest, PromptsAreBucketedByPowersOfTwo) {
  EXPECT_EQ(PromptBucket(0), 1);
  EXPECT_EQ(PromptBucket(1), 1);
  EXPECT_EQ(PromptBucket(2), 2);
  EXPECT_EQ(PromptBucket(3), 4);
  EXPECT_EQ(PromptBucket(100), 128);
  EXPECT_EQ(PromptBucket(128), 128);
  EXPECT_EQ(PromptBucket(129), 256);
  // Prompts in one bucket share a key; decode keys ignore the prompt.
  EXPECT_EQ(EncodeKey(PrefillKey(kDigest, 1, 65, "h200-pcie5", 1 << 30, "autouvm")),
            EncodeKey(PrefillKey(kDigest, 1, 128, "h200-pcie5", 1 << 30, "autouvm")));
  EXPECT_NE(EncodeKey(PrefillKey(kDigest, 1, 64, "h200-pcie5", 1 << 30, "autouvm")),
            EncodeKey(PrefillKey(kDigest, 1, 65, "h200-pcie5", 1 << 30, "autouvm")));
  EXPECT_NE(EncodeKey(DecodeKey(kDigest, 1, "h200-pcie5", 1 << 30, "autouvm")),
            EncodeKey(DecodeKey(kDigest, 2, "h200-pcie5", 1 << 30, "autouvm")));
}

TEST(ProfileKeyTest, KeysEncodeEveryPartAndParseBack) {
  const auto key = PrefillKey(kDigest, 4, 100, "rtx3060-pcie4", 6 << 20, "stock");
  const std::string encoded = EncodeKey(key);
  EXPECT_EQ(encoded, "v" + std::to_string(kProfileStoreSchemaVersion) + "/" + kDigest +
                         "/prefill/b4/p128/rtx3060-pcie4/6291456/stock");
  EXPECT_EQ(encoded.rfind(KeyPrefix(kProfileStoreSchemaVersion, kDigest), 0), 0u);
  auto parsed = ParseKey(encoded);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), key.SerializeAsString());
}

TEST(ProfileKeyTest, MalformedKeysNameTheBadPart) {
  const std::string v = "v1/" + kDigest;
  struct Case {
    std::string key, part;
  } cases[] = {
      {"x", "8 parts"},
      {"w1/" + kDigest + "/decode/b1/p0/g/0/p", "schema version"},
      {"v1/abc/decode/b1/p0/g/0/p", "model digest"},
      {v + "/train/b1/p0/g/0/p", "phase"},
      {v + "/decode/b0/p0/g/0/p", "batch"},
      {v + "/decode/b1/q0/g/0/p", "prompt bucket"},
      {v + "/decode/b1/p0//0/p", "GPU"},
      {v + "/decode/b1/p0/g/-5/p", "device budget"},
      {v + "/decode/b1/p0/g/0/", "policy"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseKey(c.key);
    ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.key;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.part)) << c.key;
  }
}

TEST(ProfileKeyTest, TheDigestCoversTheModelAndItsConfig) {
  testing::TempDir dir;
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir.Sub(name)) << text; };
  write("model.pt", "weights");
  write("model.yaml", "name: m\n");
  auto first = ModelDigest(dir.path());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 64u);
  // sha256("weightsname: m\n"): the two files in order.
  EXPECT_EQ(*first, ModelDigest(dir.path()).value());
  write("model.yaml", "name: m2\n");
  EXPECT_NE(*first, ModelDigest(dir.path()).value());
  write("model.yaml", "name: m\n");
  write("model.pt", "weightz");
  EXPECT_NE(*first, ModelDigest(dir.path()).value());
  std::remove(dir.Sub("model.pt").c_str());
  EXPECT_EQ(ModelDigest(dir.path()).status().code(), absl::StatusCode::kNotFound);
}

TEST(ProfileKeyTest, Sha256MatchesTheStandardVector) {
  const std::string d = Sha256("abc");
  ASSERT_EQ(d.size(), 32u);
  EXPECT_EQ(static_cast<unsigned char>(d[0]), 0xba);
  EXPECT_EQ(static_cast<unsigned char>(d[31]), 0xad);
}

}  // namespace
}  // namespace autouvm::profiler
