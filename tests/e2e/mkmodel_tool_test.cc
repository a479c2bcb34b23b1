// autouvm-mkmodel as a user runs it: a model entry with stored weights, one whose weights are generated
// at load (small on disk, servable), and the flags it refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using ::testing::HasSubstr;

int Mkmodel(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), AUTOUVM_MKMODEL_PATH);
  return RunCommand(args, out, err, 120);
}

TEST(MkmodelToolTest, WeightsGeneratedAtLoadLeaveASmallEntryThatServes) {
  TempDir dir;
  const std::vector<std::string> shape = {"--dim",      "256", "--layers",  "2",   "--heads",      "4",
                                          "--kv-heads", "2",   "--ffn-dim", "512", "--vocab-size", "320",
                                          "--dtype",    "bf16"};
  std::vector<std::string> stored = {"--repo", dir.path(), "--name", "stored", "--seed", "3"};
  stored.insert(stored.end(), shape.begin(), shape.end());
  std::string out, err;
  ASSERT_EQ(Mkmodel(stored, &out, &err), 0) << err;
  std::vector<std::string> generated = {
      "--repo", dir.path(), "--name", "generated", "--seed", "3", "--generate-weights-at-load"};
  generated.insert(generated.end(), shape.begin(), shape.end());
  ASSERT_EQ(Mkmodel(generated, &out, &err), 0) << err;

  const auto stored_bytes = std::filesystem::file_size(dir.Sub("stored/model.pt"));
  const auto generated_bytes = std::filesystem::file_size(dir.Sub("generated/model.pt"));
  EXPECT_LT(generated_bytes * 4, stored_bytes);
  auto config = engine::LoadModelConfig(dir.Sub("generated/model.yaml"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->generated_weights_seed, 3);
  auto runner = engine::ModelRunner::Create(dir.Sub("generated"), *config, 1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto stored_config = engine::LoadModelConfig(dir.Sub("stored/model.yaml"));
  ASSERT_TRUE(stored_config.ok());
  EXPECT_EQ(stored_config->generated_weights_seed, 0);
  auto stored_runner = engine::ModelRunner::Create(dir.Sub("stored"), *stored_config, 1);
  ASSERT_TRUE(stored_runner.ok()) << stored_runner.status();
  EXPECT_EQ((*runner)->parameter_bytes(), (*stored_runner)->parameter_bytes());  // whole weights once loaded
  auto logits = (*runner)->Prefill(0, std::vector<int32_t>{256, 72, 105});
  ASSERT_TRUE(logits.ok()) << logits.status();
}

TEST(MkmodelToolTest, GeneratedWeightsNeedASeed) {
  TempDir dir;
  std::string out, err;
  EXPECT_EQ(Mkmodel({"--repo", dir.path(), "--name", "m", "--generate-weights-at-load"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("--seed of at least 1"));
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("m/model.pt")));
}

}  // namespace
}  // namespace autouvm::testing
