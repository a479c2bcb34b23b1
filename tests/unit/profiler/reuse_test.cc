// Reuse distances over the cyclic sequence of iterations.
#include "profiler/reuse.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include "profiler/analysis.h"
#include "profiler/profile_key.h"

namespace autouvm::profiler {
namespace {

constexpr int64_t kMiB = 1 << 20;

runtime::OpRecord Op(int64_t i, std::vector<std::string> ids) {
  runtime::OpRecord op;
  op.index = i;
  op.op = "aten::mm";
  op.kernel = "aten::mm#" + std::to_string(i);
  for (const auto& id : ids) op.reads.push_back({id, 10 * kMiB, 0, 10 * kMiB});
  return op;
}

TEST(ReuseTest, AWeightSweptOncePerIterationWaitsForEveryOtherWeight) {
  runtime::AccessTrace t;
  for (int i = 0; i < 4; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i), "act:x"}));
  const auto r = ReuseDistances(t);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].id(), "param:w0");
  EXPECT_EQ(r[0].uses(), 1);
  EXPECT_EQ(r[0].max_gap_ops(), 3);                  // ops 1, 2, 3, then w0 again
  EXPECT_EQ(r[0].max_stack_bytes(), 4 * 10 * kMiB);  // w1, w2, w3 and x in between
  EXPECT_EQ(r[1].id(), "act:x");
  EXPECT_EQ(r[1].uses(), 4);
  EXPECT_EQ(r[1].max_gap_ops(), 0);
  EXPECT_EQ(r[1].max_stack_bytes(), 0);
}

TEST(ReuseTest, ANamedWeightCountsItsWholeStorageWhateverPartTheIterationReached) {
  // A table of 16 rows of which the step read one: it is placed whole, so it counts whole.
  runtime::AccessTrace t;
  t.named = {{"param:tok_embeddings", 160 * kMiB}};
  t.ops.push_back(Op(0, {"param:tok_embeddings", "act:x"}));
  const auto r = ReuseDistances(t);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].bytes(), 160 * kMiB);
  EXPECT_EQ(r[1].bytes(), 10 * kMiB);  // unnamed: what the ops reached
}

// Note [KV pools by their live rows]: a KV-cache pool counts the rows the iteration reached, from its start.
TEST(ReuseTest, AKvPoolCountsTheRowsTheIterationReachedNotItsStorage) {
  runtime::AccessTrace t;
  t.named = {{"param:kv_cache.layer0.k", 160 * kMiB}};
  t.ops.push_back(Op(0, {"param:kv_cache.layer0.k", "act:x"}));  // 10 MiB from its start
  t.ops.push_back(Op(1, {"act:x"}));
  t.ops[1].writes.push_back({"param:kv_cache.layer0.k", kMiB, 12 * kMiB, kMiB});  // a row written further on
  const auto r = ReuseDistances(t);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].id(), "param:kv_cache.layer0.k");
  EXPECT_EQ(r[0].bytes(), 13 * kMiB);
  const std::unordered_map<std::string, int64_t> reached = runtime::KvBytesReached(t);
  EXPECT_EQ(reached.size(), 1u) << "pools only, and only those the ops touch";
  EXPECT_EQ(reached.at("param:kv_cache.layer0.k"), 13 * kMiB);
}

TEST(ReuseTest, ATensorUsedTwicePerIterationHasItsLongestGapAndLargestStack) {
  runtime::AccessTrace t;
  t.ops.push_back(Op(0, {"param:a"}));
  t.ops.push_back(Op(1, {"param:b"}));
  t.ops.push_back(Op(2, {"param:a"}));
  t.ops.push_back(Op(3, {"param:c"}));
  t.ops.push_back(Op(4, {"param:d"}));
  const auto r = ReuseDistances(t);
  EXPECT_EQ(r[0].id(), "param:a");
  EXPECT_EQ(r[0].uses(), 2);
  EXPECT_EQ(r[0].max_gap_ops(), 2);                  // ops 3, 4 before op 0 of the next iteration
  EXPECT_EQ(r[0].max_stack_bytes(), 2 * 10 * kMiB);  // c and d
  EXPECT_EQ(r[0].first_use(), 0);
  EXPECT_EQ(r[1].first_use(), 1);
  EXPECT_EQ(r[1].bytes(), 10 * kMiB);
}

TEST(ReuseTest, StackDistancesMatchACountOfTheDistinctBytesInEveryGap) {
  // A random trace of 300 ops over 40 tensors of different sizes, against the definition counted
  // directly: for each pair of consecutive uses (wrapping), the bytes of the distinct other tensors
  // touched between them.
  std::mt19937 rng(7);
  runtime::AccessTrace t;
  for (int i = 0; i < 300; ++i) {
    runtime::OpRecord op;
    op.index = i;
    op.op = "aten::add";
    for (int k = 0, m = 1 + static_cast<int>(rng() % 3); k < m; ++k) {
      const int id = static_cast<int>(rng() % 40);
      op.reads.push_back({"t" + std::to_string(id), (id + 1) * kMiB, 0, (id + 1) * kMiB});
    }
    t.ops.push_back(op);
  }
  const auto r = ReuseDistances(t);
  const int64_t n = 300;
  for (const auto& tensor : r) {
    std::vector<int64_t> at;
    for (int64_t i = 0; i < n; ++i) {
      for (const auto& u : t.ops[static_cast<size_t>(i)].reads) {
        if (u.id == tensor.id() && (at.empty() || at.back() != i)) at.push_back(i);
      }
    }
    int64_t want = 0;
    for (size_t k = 0; k < at.size(); ++k) {
      const int64_t from = at[k], to = k + 1 < at.size() ? at[k + 1] : at[0] + n;
      std::set<std::string> seen;
      int64_t bytes = 0;
      for (int64_t j = from + 1; j < to; ++j) {
        for (const auto& u : t.ops[static_cast<size_t>(j % n)].reads) {
          if (u.id != tensor.id() && seen.insert(u.id).second) bytes += u.bytes;
        }
      }
      want = std::max(want, bytes);
    }
    EXPECT_EQ(tensor.max_stack_bytes(), want) << tensor.id();
    EXPECT_EQ(tensor.uses(), static_cast<int32_t>(at.size())) << tensor.id();
  }
}

TEST(AnalysisTest, AProfileCarriesItsKeyTraceClassesAndReuse) {
  runtime::AccessTrace t;
  for (int i = 0; i < 3; ++i) t.ops.push_back(Op(i, {"param:w" + std::to_string(i)}));
  const auto key = DecodeKey(std::string(64, 'c'), 1, "h200-pcie5", 0, "stock");
  const Analysis a = Analyze(key, t, *runtime::FindGpuSpec("h200-pcie5"), absl::FromUnixMillis(1234));
  const autouvm::v1::Profile& p = a.profile;
  EXPECT_EQ(std::ssize(a.plan.pinned), 0);  // stock plans nothing
  EXPECT_EQ(p.key().SerializeAsString(), key.SerializeAsString());
  EXPECT_EQ(p.trace().ops_size(), 3);
  EXPECT_EQ(p.ops_size(), 3);
  EXPECT_EQ(p.link_bound_ops(), 3);  // nothing resident: every weight crosses the link
  EXPECT_EQ(p.tensors_size(), 3);
  EXPECT_EQ(p.tensors(0).max_stack_bytes(), 2 * 10 * kMiB);
  EXPECT_EQ(p.created_unix_ms(), 1234);
}

}  // namespace
}  // namespace autouvm::profiler
