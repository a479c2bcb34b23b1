// KvBlocks: which blocks of a model's KV-cache pool each slot's sequence holds (Note [Block KV cache],
// engine/kv_blocks.cc). The pool is `blocks` blocks of `block_tokens` positions; block 0 is the null
// block, never handed out: block tables pad with it and attention masks what it holds. A sequence's
// position p lives at pool row table[p / block_tokens] * block_tokens + p % block_tokens. A block may be
// held by several slots' tables (Share: identical prompts, Note [Identical prompts share their prefill],
// engine/step_policy.cc); it goes back to the pool when the last of them gives it up.
//
//   KvBlocks kv({.blocks = 1025, .block_tokens = 16}, /*slots=*/64);
//   RETURN_IF_ERROR(kv.Resize({{slot, 130}}));     // the slot's sequence is now 130 positions long
//   int64_t row = kv.RowOf(slot, 129);
//   RETURN_IF_ERROR(kv.Share({.src_slot = slot, .dst_slot = other, .tokens = 128}));  // 8 blocks, held by both
//   kv.Release(slot);                               // its blocks go back to the pool (those `other` holds stay)
//
// No libtorch: the runner copies rows into its packed step. Not thread-safe: the runner's thread owns it.
#pragma once

#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace autouvm::engine {

struct KvPoolShape {
  int64_t blocks = 1;  // in the pool, the null block included
  int64_t block_tokens = 16;
};

// A sequence that starts with another's positions: dst_slot's first `tokens` positions (a whole number of
// blocks) are src_slot's, the same blocks held by both tables. Nothing is copied; dst never writes them.
struct KvShare {
  int32_t src_slot;
  int32_t dst_slot;
  int64_t tokens;
};

// Blocks that hold `tokens` positions.
inline int64_t BlocksFor(int64_t tokens, int64_t block_tokens) { return (tokens + block_tokens - 1) / block_tokens; }

class KvBlocks {
 public:
  KvBlocks(KvPoolShape shape, int slots);

  // Each (slot, tokens) pair sets the slot's sequence to `tokens` positions: blocks are taken for what
  // it grew by (the lowest free first, so that the rows in use stay at the pool's start), and those past
  // its end go back. All or nothing: RESOURCE_EXHAUSTED, naming the blocks wanted and free, changes
  // nothing.
  absl::Status Resize(absl::Span<const std::pair<int32_t, int64_t>> lengths);
  // As Resize, but a slot only grows: each to hold at least `tokens` positions (what a step needs;
  // Note [KV blocks taken as sequences grow], kv_blocks.cc).
  absl::Status Grow(absl::Span<const std::pair<int32_t, int64_t>> lengths);
  // As Grow(lengths), with `shares` made on the way: the slots that are no share's dst grow first (a
  // share's src may be a row of the same step that computes the shared positions), then each dst starts
  // with its src's blocks (Share), then the dsts grow past them. All or nothing, as Resize.
  absl::Status Grow(absl::Span<const std::pair<int32_t, int64_t>> lengths, absl::Span<const KvShare> shares);
  // dst (holding no blocks) starts with src's first tokens / block_tokens blocks: each is held by one
  // more table, and in use as before. Sharing again what dst already shares does nothing (a step run
  // again). FAILED_PRECONDITION, changing nothing, when dst holds other blocks or src holds fewer.
  absl::Status Share(const KvShare& share);
  // Gives all of the slot's blocks back (its sequence ended): those no other table holds go to the pool.
  void Release(int32_t slot);
  // The pool row of position `pos` of `slot`'s sequence (within its length).
  int64_t RowOf(int32_t slot, int64_t pos) const;
  // Positions the slot's blocks hold.
  int64_t capacity(int32_t slot) const;

  const KvPoolShape& shape() const { return shape_; }
  int64_t usable_blocks() const { return shape_.blocks - 1; }  // the null block aside
  int64_t blocks_in_use() const { return in_use_; }            // held by one table or more, each counted once
  // How many tables hold `block` (0: free).
  int32_t holders(int32_t block) const { return holders_[static_cast<size_t>(block)]; }
  // One past the highest pool row in use (a block boundary; at least the null block's): attention reads
  // the pool only below it.
  int64_t live_rows() const;

 private:
  // RESOURCE_EXHAUSTED: a step wants `wanted` blocks and `available` are (or would be) free.
  absl::Status Exhausted(int64_t wanted, int64_t available) const;
  // dst's check for `share`, taking src to hold `src_blocks` blocks by then.
  absl::Status CheckShare(const KvShare& share, size_t src_blocks) const;

  KvPoolShape shape_;
  std::vector<std::vector<int32_t>> tables_;  // per slot, its blocks in position order
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> free_;
  std::vector<int32_t> holders_;  // per block: how many tables hold it
  int64_t in_use_ = 0;
};

}  // namespace autouvm::engine
