#include "engine/kv_blocks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

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
// no pass ever finds the pool full. A block may be in several tables (Share): sequences of one prompt
// hold its whole blocks once (Note [Identical prompts share their prefill], engine/step_policy.cc), and
// it is free again when its last holder gives it up.
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
  int64_t wanted = 0;
  std::vector<int32_t> dropped;  // the blocks the slots that shrink give up, once per table
  for (const auto& [slot, tokens] : lengths) {
    AUTOUVM_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size()) << "slot " << slot;
    const std::vector<int32_t>& table = tables_[static_cast<size_t>(slot)];
    const size_t need = static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens));
    if (need > table.size()) wanted += static_cast<int64_t>(need - table.size());
    for (size_t i = need; i < table.size(); ++i) dropped.push_back(table[i]);
  }
  // A block goes back to the pool when every table that holds it gives it up.
  std::sort(dropped.begin(), dropped.end());
  int64_t freed = 0;
  for (size_t i = 0; i < dropped.size();) {
    size_t j = i;
    while (j < dropped.size() && dropped[j] == dropped[i]) ++j;
    if (static_cast<int32_t>(j - i) == holders_[static_cast<size_t>(dropped[i])]) ++freed;
    i = j;
  }
  const int64_t available = static_cast<int64_t>(free_.size()) + freed;
  if (wanted > available) return Exhausted(wanted, available);
  // Shrink first, so that the blocks given back serve the rows that grow.
  for (const auto& [slot, tokens] : lengths) {
    std::vector<int32_t>& table = tables_[static_cast<size_t>(slot)];
    const size_t need = static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens));
    while (table.size() > need) {
      int32_t& holders = holders_[static_cast<size_t>(table.back())];
      AUTOUVM_CHECK_GE(holders, 1) << "block " << table.back();
      if (--holders == 0) {
        free_.push(table.back());
        --in_use_;
      }
      table.pop_back();
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

absl::Status KvBlocks::Exhausted(int64_t wanted, int64_t available) const {
  return absl::ResourceExhaustedError(absl::StrCat("the KV cache has ", available, " free blocks of ",
                                                   shape_.block_tokens, " positions, the step needs ", wanted,
                                                   " more (", usable_blocks(), " in the pool)"));
}

absl::Status KvBlocks::Grow(absl::Span<const std::pair<int32_t, int64_t>> lengths) {
  std::vector<std::pair<int32_t, int64_t>> grown(lengths.begin(), lengths.end());
  for (auto& [slot, tokens] : grown) tokens = std::max(tokens, capacity(slot));
  return Resize(grown);
}

absl::Status KvBlocks::Grow(absl::Span<const std::pair<int32_t, int64_t>> lengths, absl::Span<const KvShare> shares) {
  if (shares.empty()) return Grow(lengths);
  auto share_of = [&shares](int32_t slot) -> const KvShare* {
    for (const KvShare& s : shares) {
      if (s.dst_slot == slot) return &s;
    }
    return nullptr;
  };
  std::vector<std::pair<int32_t, int64_t>> sources, dsts;  // grown: never below what the slot holds
  for (const auto& [slot, tokens] : lengths) {
    AUTOUVM_CHECK(slot >= 0 && static_cast<size_t>(slot) < tables_.size()) << "slot " << slot;
    (share_of(slot) != nullptr ? dsts : sources).push_back({slot, std::max(tokens, capacity(slot))});
  }
  // Count first (all or nothing): what the sources grow by, then what each dst grows by past its share.
  int64_t wanted = 0;
  auto blocks_after = [&](int32_t slot) {
    size_t blocks = tables_[static_cast<size_t>(slot)].size();
    for (const auto& [s, tokens] : sources) {
      if (s == slot) blocks = std::max(blocks, static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens)));
    }
    return blocks;
  };
  for (const auto& [slot, tokens] : sources) {
    wanted += static_cast<int64_t>(blocks_after(slot) - tables_[static_cast<size_t>(slot)].size());
  }
  for (const KvShare& share : shares) {
    AUTOUVM_CHECK(share.src_slot >= 0 && static_cast<size_t>(share.src_slot) < tables_.size())
        << "slot " << share.src_slot;
    AUTOUVM_CHECK(share.dst_slot >= 0 && static_cast<size_t>(share.dst_slot) < tables_.size())
        << "slot " << share.dst_slot;
    if (share_of(share.src_slot) != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("slot ", share.src_slot, " shares another slot's blocks and is shared from in the same step"));
    }
    RETURN_IF_ERROR(CheckShare(share, blocks_after(share.src_slot)));
  }
  for (const auto& [slot, tokens] : dsts) {
    const size_t shared = static_cast<size_t>(share_of(slot)->tokens / shape_.block_tokens);
    const size_t have = std::max(tables_[static_cast<size_t>(slot)].size(), shared);
    const size_t need = static_cast<size_t>(BlocksFor(tokens, shape_.block_tokens));
    if (need > have) wanted += static_cast<int64_t>(need - have);
  }
  if (wanted > static_cast<int64_t>(free_.size())) return Exhausted(wanted, static_cast<int64_t>(free_.size()));
  const absl::Status grown = Resize(sources);
  AUTOUVM_CHECK(grown.ok()) << "counted: " << grown;
  for (const KvShare& share : shares) {
    const absl::Status shared = Share(share);
    AUTOUVM_CHECK(shared.ok()) << "checked: " << shared;
  }
  const absl::Status past = Resize(dsts);
  AUTOUVM_CHECK(past.ok()) << "counted: " << past;
  return absl::OkStatus();
}

absl::Status KvBlocks::CheckShare(const KvShare& share, size_t src_blocks) const {
  if (share.src_slot == share.dst_slot || share.tokens < 0 || share.tokens % shape_.block_tokens != 0) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", share.dst_slot, " cannot share ", share.tokens,
                                                      " positions of slot ", share.src_slot, " (blocks of ",
                                                      shape_.block_tokens, ")"));
  }
  const size_t blocks = static_cast<size_t>(share.tokens / shape_.block_tokens);
  if (src_blocks < blocks) {
    return absl::FailedPreconditionError(absl::StrCat("slot ", share.dst_slot, " cannot share ", share.tokens,
                                                      " positions of slot ", share.src_slot, ", which holds ",
                                                      src_blocks * static_cast<size_t>(shape_.block_tokens)));
  }
  const std::vector<int32_t>& src = tables_[static_cast<size_t>(share.src_slot)];
  const std::vector<int32_t>& dst = tables_[static_cast<size_t>(share.dst_slot)];
  if (dst.empty()) return absl::OkStatus();
  // Shared already (a step run again): dst starts with those very blocks.
  if (dst.size() >= blocks && src.size() >= blocks && std::equal(src.begin(), src.begin() + blocks, dst.begin())) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("slot ", share.dst_slot, " holds blocks of its own and cannot ",
                                                    "start with slot ", share.src_slot, "'s"));
}

absl::Status KvBlocks::Share(const KvShare& share) {
  AUTOUVM_CHECK(share.src_slot >= 0 && static_cast<size_t>(share.src_slot) < tables_.size())
      << "slot " << share.src_slot;
  AUTOUVM_CHECK(share.dst_slot >= 0 && static_cast<size_t>(share.dst_slot) < tables_.size())
      << "slot " << share.dst_slot;
  const std::vector<int32_t>& src = tables_[static_cast<size_t>(share.src_slot)];
  RETURN_IF_ERROR(CheckShare(share, src.size()));
  std::vector<int32_t>& dst = tables_[static_cast<size_t>(share.dst_slot)];
  if (!dst.empty()) return absl::OkStatus();  // shared already
  dst.assign(src.begin(), src.begin() + share.tokens / shape_.block_tokens);
  for (const int32_t b : dst) ++holders_[static_cast<size_t>(b)];
  return absl::OkStatus();
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
