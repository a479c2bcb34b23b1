// RecordingSink: an engine::GenerationSink that keeps what a request gave — its tokens (and their text and
// logprobs), its result,
// how many times it was finished — for tests of the scheduler, its policy and the front door.
//
//   RecordingSink sink;
//   ASSERT_TRUE(scheduler.Submit(std::move(params), &sink).ok());
//   sink.done.WaitForNotification();            // notified at the first OnFinish
//   EXPECT_THAT(sink.Tokens(), ElementsAre(11, 12));
//
// Thread-safe: the scheduler's thread calls it while the test reads it.
#pragma once

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/generation_types.h"

namespace autouvm::testing {

class RecordingSink final : public engine::GenerationSink {
 public:
  void OnToken(const engine::GeneratedToken& token) override {
    absl::MutexLock lock(&mu_);
    tokens_.push_back(token.token);
    generated_.push_back(token);
  }
  void OnFinish(const std::string&, const engine::GenerationResult& r) override {
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      result_ = r;
      first = finishes_++ == 0;
    }
    if (first) done.Notify();
  }

  std::vector<int32_t> Tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  // Everything each OnToken gave: text, logprobs.
  std::vector<engine::GeneratedToken> Generated() const {
    absl::MutexLock lock(&mu_);
    return generated_;
  }
  engine::GenerationResult Result() const {
    absl::MutexLock lock(&mu_);
    return result_;
  }
  int finishes() const {
    absl::MutexLock lock(&mu_);
    return finishes_;
  }

  absl::Notification done;

 private:
  mutable absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::GeneratedToken> generated_ ABSL_GUARDED_BY(mu_);
  engine::GenerationResult result_ ABSL_GUARDED_BY(mu_);
  int finishes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace autouvm::testing
