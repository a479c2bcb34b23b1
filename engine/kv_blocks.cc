#include "engine/kv_blocks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace autouvm::engine {

// Note [Block KV cache]: a model's KV cache is a pool per layer (keys and values, [rows, kv heads, head
// dim], each its own tensor "kv_cache.layer<i>.k" / ".v" in managed memory, which the profiler and the
// executor plan like any tensor: pinned, streamed for its layer or read in place), cut into blocks of
// block_tokens rows. A sequence holds the blocks of its length and gives them back when it ends, so the
// pool is sized for the tokens live at once (models.<name>.kv_cache_tokens), not for max_batch x
// max_seq: a batch of 256 short sequences needs what 256 x their length needs. Blocks are taken lowest
// first, so the rows in use stay at the start of the pool; a step reads and writes the pool only below
// the highest of them, and the memory past it is never touched (managed and host pages are given
// physical memory when first written). Admission reserves a request's whole length (prompt plus
// max_tokens, within max_seq) against the pool (Note [Reserving KV blocks], engine/step_policy.cc), so
// no pass ever finds the pool full.
//
// Note [KV blocks taken as sequences grow]: the runner takes a sequence's blocks as its steps reach
// them, lowest first, so the rows a batch uses are a prefix of the pool that grows with it. Before each
// step the runner tells the plan's executor how far that prefix reaches (ModelRunner::
// set_kv_rows_listener), and the executor places that much of each pool, taking the room from pinned
// weights while the plan would exceed its budget (Note [KV pools follow the rows in use],
// runtime/executor_kv_rows.cc). Blocks were once taken for a sequence's whole length at admission, so that the
// plan of a batch's first step, which places a pool by the rows its profile reached, covered its last
// steps' rows too: every row a burst would ever use was on the device from its first step, taken from
// the pins (a 16-request burst of the H200's 7B decoded at 0.79 of 16 / sweep). The policy still
// reserves the whole length against the pool (Note [Reserving KV blocks], engine/step_policy.cc), so a
// step never finds it full.
KvBlocks::KvBlocks(KvPoolShape shape, int slots)
    : shape_(shape), tables_(static_cast<size_t>(slots)), holders_(static_cast<size_t>(shape.blocks), 0) {
  AUTOUVM_CHECK_GE(shape_.blocks, 1) << "a pool has at least the null block";
  AUTOUVM_CHECK_GE(shape_.block_tokens, 1);
  for (int64_t b = 1; b < shape_.blocks; ++b) free_.push(static_cast<int32_t>(b));
}

absl::Status KvBlocks::Resize(absl::Span<const std::pair<int32_t, int64_t>> lengths) {
  int64_t wanted = 0, freed = 0;
  for (const auto& [slot, tokens] : lengths) {
    AUTOUVM_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size()) << "slot " << slot;
    const int64_t need = BlocksFor(tokens, shape_.block_tokens);
    const int64_t have = static_cast<int64_t>(tables_[static_cast<size_t>(slot)].size());
    if (need > have) wanted += need - have;
    if (need < have) freed += have - need;
  }
  if (wanted > static_cast<int64_t>(free_.size()) + freed) {
    return absl::ResourceExhaustedError(absl::StrCat("the KV cache has ", free_.size() + freed, " free blocks of ",
                                                     shape_.block_tokens, " positions, the step needs ", wanted,
                                                     " more (", usable_blocks(), " in the pool)"));
  }
  // Shrink first, so that the blocks given back serve the rows that grow.
  for (const auto& [slot, tokens] : lengths) {
    std::vector<int32_t>& table = tables_[static_cast<size_t>(slot)];
    const size_t need = static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens));
    while (table.size() > need) {
      int32_t& holders = holders_[static_cast<size_t>(table.back())];
      AUTOUVM_CHECK_EQ(holders, 1) << "block " << table.back();
      holders = 0;
      free_.push(table.back());
      table.pop_back();
      --in_use_;
    }
  }
  for (const auto& [slot, tokens] : lengths) {
    std::vector<int32_t>& table = tables_[static_cast<size_t>(slot)];
    const size_t need = static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens));
    while (table.size() < need) {
      const int32_t b = free_.top();
      free_.pop();
      AUTOUVM_CHECK_EQ(holders_[static_cast<size_t>(b)], 0) << "block " << b;
      holders_[static_cast<size_t>(b)] = 1;
      table.push_back(b);
      ++in_use_;
    }
  }
  return absl::OkStatus();
}

absl::Status KvBlocks::Grow(absl::Span<const std::pair<int32_t, int64_t>> lengths) {
  std::vector<std::pair<int32_t, int64_t>> grown(lengths.begin(), lengths.end());
  for (auto& [slot, tokens] : grown) tokens = std::max(tokens, capacity(slot));
  return Resize(grown);
}

void KvBlocks::Release(int32_t slot) {
  const std::pair<int32_t, int64_t> empty{slot, 0};
  const absl::Status shrunk = Resize(absl::MakeConstSpan(&empty, 1));
  AUTOUVM_CHECK(shrunk.ok()) << "giving blocks back cannot fail: " << shrunk;
}

int64_t KvBlocks::RowOf(int32_t slot, int64_t pos) const {
  const std::vector<int32_t>& table = tables_[static_cast<size_t>(slot)];
  const size_t block = static_cast<size_t>(pos / shape_.block_tokens);
  AUTOUVM_CHECK_LT(block, table.size()) << "position " << pos << " of slot " << slot;
  return static_cast<int64_t>(table[block]) * shape_.block_tokens + pos % shape_.block_tokens;
}

int64_t KvBlocks::capacity(int32_t slot) const {
  return static_cast<int64_t>(tables_[static_cast<size_t>(slot)].size()) * shape_.block_tokens;
}

int64_t KvBlocks::live_rows() const {
  int64_t top = 0;
  for (int64_t b = shape_.blocks - 1; b > 0; --b) {
    if (holders_[static_cast<size_t>(b)] > 0) {
      top = b;
      break;
    }
  }
  return (top + 1) * shape_.block_tokens;
}

}  // namespace autouvm::engine
