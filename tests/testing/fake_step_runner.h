// FakeStepRunner: a StepRunner (engine/step_runner.h) whose model always predicts the token after the
// last one each row was given (token + 1, wrapping at the vocabulary), and that records every pass. A test may
// hold the passes at a gate (Hold / Unhold) to see the scheduler's queue while the model is busy. Its KV
// cache is a real engine::KvBlocks pool (by default one block of max_seq per slot): a pass that finds the
// pool full fails, as ModelRunner's does. The pool holds tokens: a pass writes each row's tokens to its
// slot's pool rows before any row reads (Note [Packed steps]), and records what each row attends to —
// its slot's positions up to its last, read through the slot's blocks (shared ones included: KvShare) —
// so a test sees a wrong block table as a wrong context.
//
// Thread-safe (the scheduler's thread runs passes while the test reads the record).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/kv_blocks.h"
#include "engine/step_runner.h"
#include "tests/testing/fake_clock.h"

namespace autouvm::testing {

class FakeStepRunner final : public engine::StepRunner {
 public:
  // One row of a pass, copied.
  struct Row {
    int32_t slot;
    std::vector<int32_t> tokens;
    int64_t start_pos;
    bool decode;
    bool logits;
    std::vector<int32_t> context;  // the tokens at the slot's positions 0..its last, as the pool held them
  };
  struct Share {
    int32_t src_slot, dst_slot;
    int64_t tokens;
  };
  struct Pass {
    std::vector<Row> rows;
    std::vector<Share> shares;
    bool graphs_allowed = false;  // what set_graphs_allowed last said before the pass
    int decode_rows() const {
      int n = 0;
      for (const Row& r : rows) n += r.decode ? 1 : 0;
      return n;
    }
    int prompt_rows() const { return static_cast<int>(rows.size()) - decode_rows(); }
  };

  explicit FakeStepRunner(int slots, int64_t vocab = 320, int64_t max_seq = 64)
      : FakeStepRunner(slots, vocab, max_seq, {.blocks = slots + 1, .block_tokens = max_seq}) {}
  // A runner whose KV cache is `pool` (Note [Block KV cache]): a pass that finds it full fails.
  FakeStepRunner(int slots, int64_t vocab, int64_t max_seq, engine::KvPoolShape pool)
      : slots_(slots),
        vocab_(vocab),
        max_seq_(max_seq),
        blocks_(pool, slots),
        pool_(static_cast<size_t>(pool.blocks * pool.block_tokens), -1) {}

  using engine::StepRunner::Step;
  absl::Status Step(absl::Span<const engine::KvShare> shares, absl::Span<const engine::StepRunner::Row> rows,
                    std::vector<float>* logits) override {
    Pass p;
    {
      std::vector<std::pair<int32_t, int64_t>> lengths;
      for (const auto& r : rows) lengths.push_back({r.slot, r.start_pos + static_cast<int64_t>(r.tokens.size())});
      absl::MutexLock lock(&mu_);
      if (absl::Status s = blocks_.Grow(lengths, shares); !s.ok()) {
        full_status_.Update(s);
        return s;
      }
      peak_blocks_ = std::max(peak_blocks_, blocks_.blocks_in_use());
      for (const engine::StepRunner::Row& r : rows) {
        for (size_t k = 0; k < r.tokens.size(); ++k) {
          pool_[static_cast<size_t>(blocks_.RowOf(r.slot, r.start_pos + static_cast<int64_t>(k)))] = r.tokens[k];
        }
      }
      for (const engine::StepRunner::Row& r : rows) {
        std::vector<int32_t> context;
        for (int64_t pos = 0; pos < r.start_pos + static_cast<int64_t>(r.tokens.size()); ++pos) {
          context.push_back(pool_[static_cast<size_t>(blocks_.RowOf(r.slot, pos))]);
        }
        p.rows.push_back({r.slot, std::vector<int32_t>(r.tokens.begin(), r.tokens.end()), r.start_pos, r.decode,
                          r.logits, std::move(context)});
      }
      for (const engine::KvShare& s : shares) p.shares.push_back({s.src_slot, s.dst_slot, s.tokens});
      p.graphs_allowed = graphs_allowed_;
    }
    Enter(p);
    logits->clear();
    for (const engine::StepRunner::Row& r : rows) {
      if (!r.logits) continue;
      logits->resize(logits->size() + static_cast<size_t>(vocab_), 0.0f);
      (*logits)[logits->size() - static_cast<size_t>(vocab_) + Next(r.tokens.back())] = 1.0f;
    }
    return absl::OkStatus();
  }
  // The first pass that found the pool full, if any.
  absl::Status full_status() const {
    absl::MutexLock lock(&mu_);
    return full_status_;
  }
  void Release(int32_t slot) override {
    absl::MutexLock lock(&mu_);
    blocks_.Release(slot);
  }
  void set_graphs_allowed(bool allowed) override {
    absl::MutexLock lock(&mu_);
    graphs_allowed_ = allowed;
  }
  int max_batch() const override { return slots_; }
  int64_t kv_block_tokens() const override { return blocks_.shape().block_tokens; }
  int64_t kv_blocks() const override { return blocks_.usable_blocks(); }
  // KV blocks held now, and the most held after any pass.
  int64_t blocks_in_use() const {
    absl::MutexLock lock(&mu_);
    return blocks_.blocks_in_use();
  }
  int64_t peak_blocks() const {
    absl::MutexLock lock(&mu_);
    return peak_blocks_;
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_seq() const override { return max_seq_; }
  int64_t bos_id() const override { return 256; }

  // Each pass from now on moves `clock` on by `d` (a model whose passes take that long).
  void TakePerPass(FakeClock* clock, absl::Duration d) {
    absl::MutexLock lock(&mu_);
    clock_ = clock;
    per_pass_ = d;
  }
  // Passes from now on wait in the runner until Unhold.
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Unhold() {
    absl::MutexLock lock(&mu_);
    held_ = false;
  }
  // Waits until `n` passes have begun (a held one counts once it waits).
  void AwaitPasses(size_t n) {
    auto started = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return passes_.size() >= n; };
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&started));
  }
  std::vector<Pass> passes() const {
    absl::MutexLock lock(&mu_);
    return passes_;
  }

 private:
  int64_t Next(int32_t token) const { return (static_cast<int64_t>(token) + 1) % vocab_; }
  void Enter(Pass p) {
    absl::MutexLock lock(&mu_);
    if (clock_ != nullptr) clock_->Advance(per_pass_);
    passes_.push_back(std::move(p));
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_; };
    mu_.Await(absl::Condition(&released));
  }

  const int slots_;
  const int64_t vocab_;
  const int64_t max_seq_;
  mutable absl::Mutex mu_;
  engine::KvBlocks blocks_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> pool_ ABSL_GUARDED_BY(mu_);  // the token each pool row holds (-1: none written)
  int64_t peak_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status full_status_ ABSL_GUARDED_BY(mu_);
  std::vector<Pass> passes_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool graphs_allowed_ ABSL_GUARDED_BY(mu_) = false;
  FakeClock* clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Duration per_pass_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autouvm::testing
