// The engine's words for one generation: what a request asks (GenerationParams, validated), what it
// gets back (GenerationResult), where its tokens go (GenerationSink), the handle that cancels it, and
// the hooks the profiler puts around each forward pass.
//
// Plain types; RequestHandle is safe from any thread, the sink's and hooks' contracts are below.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/sampler.h"
#include "profiler/iteration_hooks.h"

namespace autouvm::engine {

enum class FinishReason { kStop, kLength, kCancelled };

struct GenerationParams {
  std::string request_id;
  std::vector<int32_t> prompt;  // already tokenized, bos included, validated
  int32_t max_tokens = 16;
  SamplingConfig sampling;
  std::vector<int32_t> stop_token_ids;  // eos is added here by the caller unless ignore_eos
  std::vector<std::string> stop_strings;
  // -1: off; 0..20: each token comes with its logprob and that many most likely alternatives, from the
  // model's distribution before any sampling setting (Note [Raw logprobs], engine/step_policy.cc).
  int32_t logprobs = -1;
  absl::Time deadline = absl::InfiniteFuture();
};

struct GenerationResult {
  absl::Status status;  // OK, DEADLINE_EXCEEDED, CANCELLED, UNAVAILABLE (shutdown) or INTERNAL
  FinishReason reason = FinishReason::kStop;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double queue_ms = 0;
  double time_to_first_token_ms = 0;
  double per_token_ms = 0;
  double total_ms = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// One generated token (never a stop token), as the sink hears of it.
struct GeneratedToken {
  int32_t token = 0;
  std::string text;               // the text this token completed (possibly empty)
  float logprob = 0;              // set when the request asked for logprobs (GenerationParams::logprobs >= 0)
  std::vector<TokenLogprob> top;  // the `logprobs` most likely tokens, most likely first (ties: lower id first)
};

class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnToken(const GeneratedToken& token) = 0;
  // Final call: any held-back text, then the result. The sink may be destroyed once this returns.
  virtual void OnFinish(const std::string& tail_text, const GenerationResult& result) = 0;
};

class RequestHandle {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

// The hooks the model's session puts around each forward pass (profiler/iteration_hooks.h).
using profiler::IterationHooks;
using profiler::IterationPhase;

}  // namespace autouvm::engine
