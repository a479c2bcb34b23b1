#include "engine/kv_blocks.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace autouvm::engine {
namespace {

using Lengths = std::vector<std::pair<int32_t, int64_t>>;

TEST(KvBlocksTest, ASequenceTakesBlocksAsItGrowsAndGivesThemBackWhenItEnds) {
  KvBlocks kv({.blocks = 9, .block_tokens = 4}, /*slots=*/3);
  EXPECT_EQ(kv.usable_blocks(), 8);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 5}}).ok());  // positions 0..4: two blocks
  EXPECT_EQ(kv.blocks_in_use(), 2);
  EXPECT_EQ(kv.capacity(0), 8);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 8}}).ok());  // still two
  EXPECT_EQ(kv.blocks_in_use(), 2);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 9}}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 3);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 0}}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 0);
  EXPECT_EQ(kv.capacity(0), 0);
}

TEST(KvBlocksTest, RowsOfASequenceAreItsBlocksInPositionOrderAndNeverTheNullBlock) {
  KvBlocks kv({.blocks = 7, .block_tokens = 4}, 2);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 4}, {1, 4}}).ok());  // slot 0 block 1, slot 1 block 2
  ASSERT_TRUE(kv.Resize(Lengths{{0, 10}}).ok());         // slot 0 gains blocks 3 and 4
  std::set<int64_t> rows;
  for (int64_t p = 0; p < 10; ++p) {
    const int64_t row = kv.RowOf(0, p);
    EXPECT_GE(row, 4) << "position " << p << " in the null block";
    EXPECT_EQ(row % 4, p % 4) << "position " << p;
    rows.insert(row);
  }
  for (int64_t p = 0; p < 4; ++p) rows.insert(kv.RowOf(1, p));
  EXPECT_EQ(rows.size(), 14u) << "two positions share a row";
  EXPECT_EQ(kv.RowOf(0, 0), 4);
  EXPECT_EQ(kv.RowOf(1, 0), 8);
  EXPECT_EQ(kv.RowOf(0, 4), 12);
  EXPECT_EQ(kv.RowOf(0, 8), 16);
}

TEST(KvBlocksTest, FreedBlocksAreTakenLowestFirstSoTheLiveRowsStayAtThePoolsStart) {
  KvBlocks kv({.blocks = 9, .block_tokens = 2}, 4);
  EXPECT_EQ(kv.live_rows(), 2);                                          // the null block alone
  ASSERT_TRUE(kv.Resize(Lengths{{0, 2}, {1, 2}, {2, 2}, {3, 2}}).ok());  // blocks 1..4
  EXPECT_EQ(kv.live_rows(), 10);
  ASSERT_TRUE(kv.Resize(Lengths{{3, 0}}).ok());
  EXPECT_EQ(kv.live_rows(), 8);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 0}}).ok());  // block 1 free, 2 and 3 held
  EXPECT_EQ(kv.live_rows(), 8);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 2}}).ok());
  EXPECT_EQ(kv.RowOf(0, 0), 2) << "block 1, the lowest free, again";
  EXPECT_EQ(kv.live_rows(), 8);
}

TEST(KvBlocksTest, AStepThatNeedsMoreBlocksThanAreFreeChangesNothingAndSaysHowMany) {
  KvBlocks kv({.blocks = 5, .block_tokens = 4}, 3);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 8}}).ok());  // 2 of 4
  const int64_t row = kv.RowOf(0, 7);
  const absl::Status s = kv.Resize(Lengths{{1, 4}, {2, 8}});  // wants 3, 2 free
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "the KV cache has 2 free blocks of 4 positions, the step needs 3 more (4 in the pool)");
  EXPECT_EQ(kv.blocks_in_use(), 2);
  EXPECT_EQ(kv.capacity(1), 0);
  EXPECT_EQ(kv.RowOf(0, 7), row);
  // A slot that shrinks in the same step gives its blocks to one that grows.
  ASSERT_TRUE(kv.Resize(Lengths{{0, 0}, {1, 4}, {2, 8}}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 3);
}

TEST(KvBlocksTest, GrowOnlyEverAddsBlocksAndReleaseGivesThemAllBack) {
  KvBlocks kv({.blocks = 9, .block_tokens = 4}, 2);
  ASSERT_TRUE(kv.Grow(Lengths{{0, 12}}).ok());  // reserved at admission: 3 blocks
  ASSERT_TRUE(kv.Grow(Lengths{{0, 2}, {1, 5}}).ok());
  EXPECT_EQ(kv.capacity(0), 12) << "a step inside the reservation keeps it";
  EXPECT_EQ(kv.capacity(1), 8);
  EXPECT_EQ(kv.Grow(Lengths{{1, 30}}).code(), absl::StatusCode::kResourceExhausted);  // 6 more, 3 free
  EXPECT_EQ(kv.capacity(1), 8);
  kv.Release(0);
  EXPECT_EQ(kv.capacity(0), 0);
  EXPECT_EQ(kv.blocks_in_use(), 2);
}

}  // namespace
}  // namespace autouvm::engine
