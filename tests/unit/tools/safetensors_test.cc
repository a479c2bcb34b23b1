// tools/safetensors.h: tensors read in place from one file and from shards, and every kind of malformed
// file refused with the file and the problem named.
#include "tools/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/testing/safetensors_writer.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::tools {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteRawSafetensors;
using testing::WriteSafetensors;

TEST(SafetensorsTest, ReadsEveryTensorInPlaceWithItsDtypeAndShape) {
  TempDir dir;
  const torch::Tensor a = torch::arange(12, torch::kFloat).view({3, 4});
  const torch::Tensor b = torch::arange(5, torch::kFloat).to(torch::kBFloat16);
  WriteSafetensors(dir.Sub("model.safetensors"), {{"a", a}, {"b", b}}, {{"format", "pt"}});
  auto f = SafetensorsFile::Open(dir.Sub("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  auto va = (*f)->View("a");
  ASSERT_TRUE(va.ok());
  EXPECT_EQ(va->dtype, "F32");
  EXPECT_EQ(va->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(va->bytes, 48);
  EXPECT_EQ(std::memcmp(va->data, a.data_ptr(), 48), 0);
  auto vb = (*f)->View("b");
  ASSERT_TRUE(vb.ok());
  EXPECT_EQ(vb->dtype, "BF16");
  EXPECT_EQ(vb->numel(), 5);
  EXPECT_EQ(std::memcmp(vb->data, b.data_ptr(), 10), 0);
  EXPECT_EQ((*f)->View("c").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string((*f)->View("c").status().message()), HasSubstr("no tensor \"c\""));
}

TEST(SafetensorsTest, MalformedFilesAreRefusedNamingTheFileAndTheProblem) {
  TempDir dir;
  const std::string path = dir.Sub("model.safetensors");
  const std::string f32x4 = std::string(16, '\0');
  struct Case {
    std::string what, header, data, says;
  };
  const std::vector<Case> cases = {
      {"not JSON", "{not json", "", "the header is not JSON"},
      {"not an object", "[1, 2]", "", "not a JSON object"},
      {"unknown dtype", R"({"w": {"dtype": "F7", "shape": [4], "data_offsets": [0, 16]}})", f32x4,
       "tensor \"w\": unknown dtype \"F7\""},
      {"no shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", f32x4, "tensor \"w\": no shape"},
      {"negative size", R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", f32x4, "is not sizes"},
      {"bytes for another shape", R"({"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}})", f32x4,
       "16 bytes for shape [5] of F32 (20 expected)"},
      {"past the data", R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", f32x4,
       "bytes [0, 32) lie outside the 16 bytes of data"},
      {"offsets backwards", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}})", f32x4, "lie outside"},
      {"offsets not a pair", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", f32x4,
       "data_offsets is not [begin, end]"},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
       f32x4, "tensors \"a\" and \"b\" overlap"},
      {"metadata not strings", R"({"__metadata__": {"x": 1}})", "", "__metadata__.x is not a string"},
  };
  for (const Case& c : cases) {
    WriteRawSafetensors(path, c.header, c.data);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(path + ": ")) << c.what;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.says)) << c.what;
  }
  // Shorter than its header's length, or than the length itself.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  EXPECT_THAT(std::string(SafetensorsFile::Open(path).status().message()), HasSubstr("shorter than its 8-byte"));
  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", f32x4);
  std::filesystem::resize_file(path, 20);
  EXPECT_THAT(std::string(SafetensorsFile::Open(path).status().message()), HasSubstr("does not fit in its 20 bytes"));
  EXPECT_EQ(SafetensorsFile::Open(dir.Sub("absent.safetensors")).status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShardsAreFoundThroughTheIndexAndCheckedAgainstIt) {
  TempDir dir;
  WriteSafetensors(dir.Sub("model-00001-of-00002.safetensors"), {{"a", torch::ones({2})}});
  WriteSafetensors(dir.Sub("model-00002-of-00002.safetensors"), {{"b", torch::zeros({3})}});
  auto index = [&](const std::string& weight_map) {
    std::ofstream(dir.Sub("model.safetensors.index.json")) << R"({"metadata": {}, "weight_map": )" << weight_map << "}";
  };
  index(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})");
  auto c = Checkpoint::Open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*c)->View("b")->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ((*c)->total_bytes(), 20);

  index(R"({"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})");
  EXPECT_THAT(std::string(Checkpoint::Open(dir.path()).status().message()),
              HasSubstr("weight_map puts \"a\" in model-00002-of-00002.safetensors, which does not hold it"));
  index(R"({"a": "model-00003-of-00002.safetensors"})");
  EXPECT_THAT(std::string(Checkpoint::Open(dir.path()).status().message()),
              HasSubstr("model-00003-of-00002.safetensors: cannot open"));
  index(R"({"a": "../elsewhere.safetensors"})");
  EXPECT_THAT(std::string(Checkpoint::Open(dir.path()).status().message()), HasSubstr("is not a file in"));
  std::ofstream(dir.Sub("model.safetensors.index.json")) << R"({"metadata": {}})";
  EXPECT_THAT(std::string(Checkpoint::Open(dir.path()).status().message()), HasSubstr("no weight_map object"));

  TempDir empty;
  EXPECT_THAT(std::string(Checkpoint::Open(empty.path()).status().message()),
              HasSubstr("neither model.safetensors nor model.safetensors.index.json"));
}

}  // namespace
}  // namespace autouvm::tools
