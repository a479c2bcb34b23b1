// GPU specs: the built-in table and specs given in YAML.
#include "runtime/gpu_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace autouvm::runtime {
namespace {

using ::testing::HasSubstr;

TEST(GpuSpecTest, TheBuiltInSpecsAreCompleteAndFoundByName) {
  for (const char* name : {"h200-pcie5", "h100-pcie5", "a100-pcie4", "rtx3060-pcie4"}) {
    auto spec = FindGpuSpec(name);
    ASSERT_TRUE(spec.ok()) << name;
    EXPECT_GT(spec->memory_bytes, 0) << name;
    EXPECT_GT(spec->hbm_bytes_per_s, spec->link_bytes_per_s) << name;
    EXPECT_GT(spec->peak_flops, 0) << name;
    EXPECT_GT(spec->uvm.fault_batch_s, 0) << name;
    EXPECT_LT(spec->uvm.remote_bytes_per_s, spec->link_bytes_per_s) << name;
  }
  auto h200 = FindGpuSpec("h200-pcie5");
  EXPECT_DOUBLE_EQ(h200->link_bytes_per_s, 55.4e9);  // NOTES.md, pinned copies
  auto rtx = FindGpuSpec("rtx3060-pcie4");
  EXPECT_EQ(rtx->memory_bytes, int64_t{12} << 30);
  EXPECT_DOUBLE_EQ(rtx->hbm_bytes_per_s, 360e9);
  EXPECT_DOUBLE_EQ(rtx->link_bytes_per_s, 20e9);
}

TEST(GpuSpecTest, AnUnknownNameListsTheKnownOnes) {
  auto spec = FindGpuSpec("tpu-v9");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("tpu-v9"));
  EXPECT_THAT(spec.status().message(), HasSubstr("h200-pcie5"));
}

TEST(GpuSpecTest, YamlSpecsStartFromABaseAndOverrideFields) {
  auto specs = ParseGpuSpecs(R"(
gpus:
  - name: l40s-pcie4
    base: a100-pcie4
    memory_gib: 48
    hbm_gb_per_s: 864
    peak_tflops: 362
    uvm:
      fault_batch_us: 20
      d2h_clean_page_us: 5
      prefetch_host_hold: 0.5
      prefetch_resident_block_us: 3
  - name: scratch
    memory_gib: 1
    hbm_gb_per_s: 100
    peak_tflops: 1
    link_gb_per_s: 10
    uvm: {remote_gb_per_s: 9}
)");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  const GpuSpec& l40s = (*specs)[0];
  EXPECT_EQ(l40s.name, "l40s-pcie4");
  EXPECT_EQ(l40s.memory_bytes, int64_t{48} << 30);
  EXPECT_DOUBLE_EQ(l40s.hbm_bytes_per_s, 864e9);
  EXPECT_DOUBLE_EQ(l40s.link_bytes_per_s, FindGpuSpec("a100-pcie4")->link_bytes_per_s);  // from the base
  EXPECT_NEAR(l40s.uvm.fault_batch_s, 20e-6, 1e-12);
  EXPECT_NEAR(l40s.uvm.d2h_clean_page_s, 5e-6, 1e-12);
  EXPECT_DOUBLE_EQ(l40s.uvm.prefetch_host_hold, 0.5);
  EXPECT_NEAR(l40s.uvm.prefetch_resident_block_s, 3e-6, 1e-12);
  EXPECT_DOUBLE_EQ(l40s.uvm.prefetch_resident_call_s, FindGpuSpec("h200-pcie5")->uvm.prefetch_resident_call_s);
  EXPECT_DOUBLE_EQ((*specs)[1].uvm.remote_bytes_per_s, 9e9);
}

TEST(GpuSpecTest, BadYamlNamesTheEntryAndKey) {
  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"gpus: [{name: x, base: h200-pcie5, hbm_gb_per_s: fast}]", "gpus[0].hbm_gb_per_s"},
      {"gpus: [{name: x, base: h200-pcie5, colour: green}]", "gpus[0].colour"},
      {"gpus: [{name: x, base: h200-pcie5, uvm: {fault_batch_us: -1}}]", "gpus[0].uvm.fault_batch_us"},
      {"gpus: [{name: x, base: h200-pcie5, uvm: {prefetch_host_hold: 1.5}}]", "gpus[0].uvm.prefetch_host_hold"},
      {"gpus: [{base: h200-pcie5}]", "gpus[0].name"},
      {"gpus: [{name: x, base: nope}]", "gpus[0].base"},
      {"gpus: [{name: x, memory_gib: 8}]", "required without a base"},
      {"gpus: {name: x}", "must be a list"},
      {"gpus: [", "not valid YAML"},
  };
  for (const Case& c : cases) {
    auto specs = ParseGpuSpecs(c.yaml);
    ASSERT_FALSE(specs.ok()) << c.yaml;
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(specs.status().message(), HasSubstr(c.message)) << c.yaml;
  }
}

}  // namespace
}  // namespace autouvm::runtime
