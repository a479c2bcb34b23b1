// FakeStepRunner: a StepRunner (engine/step_runner.h) whose model always predicts the token after the
// last one each row was given (token + 1, wrapping at the vocabulary), and that records every pass. A test may
// hold the passes at a gate (Hold / Release) to see the scheduler's queue while the model is busy.
//
// Thread-safe (the scheduler's thread runs passes while the test reads the record).
#pragma once

#include <vector>

#include "absl/synchronization/mutex.h"
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
  };
  struct Pass {
    std::vector<Row> rows;
    int decode_rows() const {
      int n = 0;
      for (const Row& r : rows) n += r.decode ? 1 : 0;
      return n;
    }
    int prompt_rows() const { return static_cast<int>(rows.size()) - decode_rows(); }
  };

  explicit FakeStepRunner(int slots, int64_t vocab = 320, int64_t max_seq = 64)
      : slots_(slots), vocab_(vocab), max_seq_(max_seq) {}

  absl::Status Step(absl::Span<const engine::StepRunner::Row> rows, std::vector<float>* logits) override {
    Pass p;
    for (const engine::StepRunner::Row& r : rows) {
      p.rows.push_back(
          {r.slot, std::vector<int32_t>(r.tokens.begin(), r.tokens.end()), r.start_pos, r.decode, r.logits});
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
  int max_batch() const override { return slots_; }
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_seq() const override { return max_seq_; }
  int64_t bos_id() const override { return 256; }

  // Each pass from now on moves `clock` on by `d` (a model whose passes take that long).
  void TakePerPass(FakeClock* clock, absl::Duration d) {
    absl::MutexLock lock(&mu_);
    clock_ = clock;
    per_pass_ = d;
  }
  // Passes from now on wait in the runner until Release.
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
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
  std::vector<Pass> passes_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  FakeClock* clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Duration per_pass_ ABSL_GUARDED_BY(mu_);
};

}  // namespace autouvm::testing
