// autouvm-sim as a user runs it: record a generated model's decode step, replay it under capacities
// and GPU specs, and get clear errors for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "engine/llama_builder.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using ::testing::HasSubstr;

int Sim(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), AUTOUVM_SIM_PATH);
  return RunCommand(args, out, err, 120);
}

// The rows of the replay table, split into cells.
std::vector<std::vector<std::string>> Rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| GPU", 0) == 0) continue;
    std::vector<std::string> cells;
    std::istringstream cs(line.substr(2));
    std::string cell;
    while (std::getline(cs, cell, '|')) {
      const size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(SimToolTest, RecordsAndReplaysADecodeStep) {
  TempDir dir;
  // The embedded default's shape (2.9M fp32 parameters, ~12 MB): enough 2 MiB blocks to evict.
  ASSERT_TRUE(engine::WriteLlamaModel(engine::DefaultTinyModelConfig("simmodel"), 3, dir.path()).ok());
  const std::string trace = dir.Sub("decode.trace");
  std::string out, err;
  ASSERT_EQ(Sim({"record", "--model", dir.Sub("simmodel"), "--batch", "2", "--out", trace}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("recorded decode of simmodel (batch 2"));

  ASSERT_EQ(
      Sim({"replay", "--trace", trace, "--gpu", "h200-pcie5,rtx3060-pcie4", "--oversubscription", "1,2"}, &out, &err),
      0)
      << err;
  const auto rows = Rows(out);
  ASSERT_EQ(rows.size(), 4u) << out;
  EXPECT_EQ(rows[0][0], "h200-pcie5");
  EXPECT_EQ(rows[2][0], "rtx3060-pcie4");
  // Capacity 1x: the steady iteration is the resident one and faults nothing; 2x: it faults and evicts.
  EXPECT_EQ(rows[0][1], "1.00");
  EXPECT_EQ(rows[0][7], rows[0][4]) << out;  // steady ms == resident ms
  EXPECT_EQ(rows[0][12], "0");               // faults
  EXPECT_EQ(rows[1][1], "2.00");
  EXPECT_GT(std::stoll(rows[1][12]), 0) << out;
  EXPECT_GT(std::stoll(rows[1][14]), 0) << out;                    // evictions
  EXPECT_GT(std::stod(rows[3][7]), std::stod(rows[1][7])) << out;  // the slower link is slower

  // The driver emulated at op boundaries (what bench/offload_bench measures on the GPU): the simulated
  // driver evicts nothing, the ops still fault what the emulator sent back.
  ASSERT_EQ(Sim({"replay", "--trace", trace, "--oversubscription", "2", "--emulated-eviction"}, &out, &err), 0) << err;
  const auto emulated = Rows(out);
  ASSERT_EQ(emulated.size(), 1u) << out;
  EXPECT_EQ(emulated[0][14], "0") << out;  // evictions by the simulated driver
  EXPECT_GT(std::stoll(emulated[0][12]), 0) << out;
}

TEST(SimToolTest, ShowsWhatThePlanOfAPrefillPinsAndFetches) {
  TempDir dir;
  // Weights of a few MiB each, and a prompt long enough that the products read them at too high an
  // intensity to be read in place: the plan streams them.
  engine::ModelConfig c = engine::DefaultTinyModelConfig("simmodel");
  c.dim = 512, c.head_dim = 64, c.ffn_dim = 1408;
  ASSERT_TRUE(engine::WriteLlamaModel(c, 3, dir.path()).ok());
  const std::string trace = dir.Sub("prefill.trace");
  std::string out, err;
  ASSERT_EQ(Sim({"record", "--model", dir.Sub("simmodel"), "--phase", "prefill", "--prompt-len", "256", "--out", trace},
                &out, &err),
            0)
      << err;
  ASSERT_EQ(Sim({"replay", "--trace", trace, "--policy", "autouvm", "--oversubscription", "2", "--show-plan", "3"},
                &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("plan, h200-pcie5 at 2.00x: budget "));
  EXPECT_THAT(out, HasSubstr("| tensor | MiB | fetches per iteration | first used by |"));
  int listed = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) listed += line.rfind("| param:", 0) == 0 ? 1 : 0;
  EXPECT_GE(listed, 1) << out;
  EXPECT_LE(listed, 3) << out;
  // Without the flag, or for stock, no plan is shown.
  ASSERT_EQ(Sim({"replay", "--trace", trace, "--oversubscription", "2", "--show-plan", "3"}, &out, &err), 0) << err;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("plan, ")));
}

TEST(SimToolTest, BadInputIsNamed) {
  TempDir dir;
  const std::string junk = dir.Sub("junk.trace");
  std::ofstream(junk) << "not a protobuf \xff\xff\xff";
  std::string out, err;
  EXPECT_EQ(Sim({"replay", "--trace", junk}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("junk.trace"));
  EXPECT_EQ(Sim({"replay", "--trace", dir.Sub("missing.trace")}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("cannot open"));
  const std::string specs = dir.Sub("specs.yaml");
  std::ofstream(specs) << "gpus: [{name: x, base: h200-pcie5, hbm_gb_per_s: fast}]\n";
  EXPECT_EQ(Sim({"replay", "--trace", junk, "--gpu-specs", specs}, &out, &err), 1);
  EXPECT_EQ(Sim({"record", "--model", dir.Sub("nothing"), "--out", dir.Sub("t")}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("model.yaml"));
}

}  // namespace
}  // namespace autouvm::testing
