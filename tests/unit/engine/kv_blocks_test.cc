#include "engine/kv_blocks.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
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

// Note [Identical prompts share their prefill]: a sibling's first blocks are its leader's, held by both;
// a block goes back to the pool only when its last holder gives it up.
TEST(KvBlocksTest, ASharedBlockIsFreedOnlyAfterEveryHolderReleasedIt) {
  KvBlocks kv({.blocks = 9, .block_tokens = 4}, /*slots=*/3);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 10}}).ok());  // blocks 1, 2, 3
  ASSERT_TRUE(kv.Share({.src_slot = 0, .dst_slot = 1, .tokens = 8}).ok());
  ASSERT_TRUE(kv.Share({.src_slot = 0, .dst_slot = 2, .tokens = 8}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 3) << "sharing takes no block";
  EXPECT_EQ(kv.capacity(1), 8);
  for (int64_t p = 0; p < 8; ++p) {
    EXPECT_EQ(kv.RowOf(1, p), kv.RowOf(0, p)) << "position " << p;
    EXPECT_EQ(kv.RowOf(2, p), kv.RowOf(0, p)) << "position " << p;
  }
  EXPECT_EQ(kv.holders(1), 3);
  EXPECT_EQ(kv.holders(3), 1) << "the block of the leader's last positions is its own";
  // The siblings grow past the shared blocks into blocks of their own.
  ASSERT_TRUE(kv.Grow(Lengths{{1, 10}, {2, 9}}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 5);
  EXPECT_EQ(kv.RowOf(1, 8), 16) << "block 4, the lowest free";
  EXPECT_EQ(kv.RowOf(2, 8), 20);
  EXPECT_EQ(kv.live_rows(), 24);
  kv.Release(0);  // the leader ends first: its own block 3 goes back, the shared ones stay
  EXPECT_EQ(kv.blocks_in_use(), 4);
  EXPECT_EQ(kv.holders(1), 2);
  EXPECT_EQ(kv.holders(3), 0);
  EXPECT_EQ(kv.RowOf(2, 0), 4);
  EXPECT_EQ(kv.live_rows(), 24);
  kv.Release(2);
  EXPECT_EQ(kv.blocks_in_use(), 3);
  EXPECT_EQ(kv.live_rows(), 20);
  EXPECT_EQ(kv.holders(2), 1);
  // A shrink of the last holder frees a shared block, and those blocks serve a step that grows.
  ASSERT_TRUE(kv.Resize(Lengths{{1, 4}, {0, 16}}).ok());
  EXPECT_EQ(kv.blocks_in_use(), 5);
  EXPECT_EQ(kv.holders(2), 1) << "given back by slot 1, taken by slot 0";
  kv.Release(1);
  kv.Release(0);
  EXPECT_EQ(kv.blocks_in_use(), 0);
  EXPECT_EQ(kv.live_rows(), 4) << "the null block alone";
  for (int32_t b = 1; b < 9; ++b) EXPECT_EQ(kv.holders(b), 0) << "block " << b;
}

TEST(KvBlocksTest, AStepGrowsAShareSourceFirstSoItsSiblingsShareWhatItComputesInThatStep) {
  KvBlocks kv({.blocks = 7, .block_tokens = 4}, 3);
  const std::vector<KvShare> shares = {{.src_slot = 0, .dst_slot = 1, .tokens = 8},
                                       {.src_slot = 0, .dst_slot = 2, .tokens = 8}};
  // The leader's whole prompt of 10 and both siblings' tails [8, 10), from an empty pool.
  ASSERT_TRUE(kv.Grow(Lengths{{1, 10}, {0, 10}, {2, 10}}, shares).ok());
  EXPECT_EQ(kv.blocks_in_use(), 5);  // 3 of the leader's, one tail block each
  EXPECT_EQ(kv.RowOf(1, 4), kv.RowOf(0, 4));
  EXPECT_NE(kv.RowOf(1, 8), kv.RowOf(0, 8));
  EXPECT_NE(kv.RowOf(1, 8), kv.RowOf(2, 8));
  // The same step again (the hooks re-run a pass): nothing changes.
  const int64_t row = kv.RowOf(2, 9);
  ASSERT_TRUE(kv.Grow(Lengths{{1, 10}, {0, 10}, {2, 10}}, shares).ok());
  EXPECT_EQ(kv.blocks_in_use(), 5);
  EXPECT_EQ(kv.RowOf(2, 9), row);
  EXPECT_EQ(kv.holders(static_cast<int32_t>(kv.RowOf(0, 0) / 4)), 3);
  // More than the pool holds: nothing changes, the blocks past each share counted.
  kv.Release(1);
  kv.Release(2);
  const absl::Status full = kv.Grow(Lengths{{0, 14}, {1, 16}, {2, 16}}, shares);  // 1 + 2 + 2 > 3 free
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(full.message()),
            "the KV cache has 3 free blocks of 4 positions, the step needs 5 more (6 in the pool)");
  EXPECT_EQ(kv.capacity(1), 0);
  EXPECT_EQ(kv.capacity(0), 12);
  EXPECT_EQ(kv.blocks_in_use(), 3);
}

TEST(KvBlocksTest, ASlotWithBlocksOfItsOwnOrASourceTooShortCannotShare) {
  KvBlocks kv({.blocks = 9, .block_tokens = 4}, 3);
  ASSERT_TRUE(kv.Resize(Lengths{{0, 8}, {1, 4}}).ok());
  EXPECT_EQ(kv.Share({.src_slot = 0, .dst_slot = 1, .tokens = 8}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Share({.src_slot = 0, .dst_slot = 2, .tokens = 12}).message(),
            "slot 2 cannot share 12 positions of slot 0, which holds 8");
  EXPECT_EQ(kv.Share({.src_slot = 0, .dst_slot = 2, .tokens = 6}).code(), absl::StatusCode::kFailedPrecondition)
      << "not a whole number of blocks";
  EXPECT_EQ(kv.capacity(2), 0);
  EXPECT_EQ(kv.holders(1), 1);
}

}  // namespace
}  // namespace autouvm::engine
