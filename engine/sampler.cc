#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace autouvm::engine {

int32_t ArgMax(absl::Span<const float> values) {
  // Greedy decoding runs this over the vocabulary for every row of every step, on the model's scheduler
  // thread (on a 32000-word vocabulary at batch 16 a plain loop took ~23 us a row, a tenth of a resident
  // 7B's step on an H100). So blocks of kBlock values: each block's maximum in kLanes independent lanes
  // (which the compiler vectorizes), and only a block whose maximum beats the best so far is scanned for
  // its index. The first of equal maxima wins; a NaN never does (no comparison with it holds), unless it
  // is the first value.
  constexpr size_t kLanes = 16, kBlock = 4 * kLanes;
  if (values.empty()) return 0;
  const float* v = values.data();
  const size_t n = values.size();
  float best_value = v[0];
  int32_t best = 0;
  size_t i = 1;
  for (; i + kBlock <= n; i += kBlock) {
    float lanes[kLanes];
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<float>::infinity();
    for (size_t k = 0; k < kBlock; k += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) lanes[j] = v[i + k + j] > lanes[j] ? v[i + k + j] : lanes[j];
    }
    float block_max = lanes[0];
    for (size_t j = 1; j < kLanes; ++j) block_max = lanes[j] > block_max ? lanes[j] : block_max;
    if (!(block_max > best_value)) continue;
    for (size_t k = i;; ++k) {
      if (v[k] == block_max) {
        best_value = block_max;
        best = static_cast<int32_t>(k);
        break;
      }
    }
  }
  for (; i < n; ++i) {
    if (v[i] > best_value) {
      best_value = v[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(const SamplingConfig& config) : config_(config), rng_(config.seed) {}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

// Note [Presence and frequency penalties]: OpenAI's definition (vLLM's too), applied after the
// repetition penalty: for each token j generated so far by this request, the prompt not included,
//   logit[j] -= count[j] * frequency_penalty + (count[j] > 0 ? presence_penalty : 0).
// The counts grow with the context, one token a call, so a step costs the distinct tokens generated,
// never the vocabulary; nothing is done when both penalties are 0.
void Sampler::ApplyPenalties(absl::Span<float> logits, absl::Span<const int32_t> context, size_t prompt_len) {
  const size_t n = logits.size();
  if (config_.repetition_penalty != 1.0f) {
    seen_.assign(n, 0);
    for (int32_t id : context) {
      if (id < 0 || static_cast<size_t>(id) >= n || seen_[id]) continue;
      seen_[id] = 1;
      float& l = logits[id];
      l = l > 0 ? l / config_.repetition_penalty : l * config_.repetition_penalty;
    }
  }
  if (config_.presence_penalty == 0.0f && config_.frequency_penalty == 0.0f) return;
  const absl::Span<const int32_t> generated = context.subspan(std::min(prompt_len, context.size()));
  if (generated.size() < counted_) {  // not the context of the last call: count afresh
    generated_counts_.clear();
    counted_ = 0;
  }
  for (; counted_ < generated.size(); ++counted_) ++generated_counts_[generated[counted_]];
  for (const auto& [id, count] : generated_counts_) {
    if (id < 0 || static_cast<size_t>(id) >= n) continue;
    logits[id] -= static_cast<float>(count) * config_.frequency_penalty + config_.presence_penalty;
  }
}

int32_t Sampler::Sample(absl::Span<float> logits, absl::Span<const int32_t> context, size_t prompt_len) {
  const size_t n = logits.size();
  ApplyPenalties(logits, context, prompt_len);
  if (config_.temperature == 0.0f) return ArgMax(logits);

  // Candidates sorted by logit, descending (ties by index, so the order is deterministic).
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  size_t keep = n;
  if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) keep = config_.top_k;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
  order_.resize(keep);

  const float max_logit = logits[order_[0]];
  std::vector<double> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order_[i]] - max_logit) / config_.temperature);
    total += probs[i];
  }
  if (config_.top_p < 1.0f) {
    // Note [top_p boundary]: top_p arrives as a float (0.8f is 0.80000001...), the running sum is a double
    // with rounding error of its own; a set whose probabilities add up to top_p must count as reaching it.
    const double reach = static_cast<double>(config_.top_p) - 1e-6;
    double cumulative = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += probs[i] / total;
      if (cumulative >= reach) {
        cut = i + 1;
        break;
      }
    }
    probs.resize(cut);
    order_.resize(cut);
    total = std::accumulate(probs.begin(), probs.end(), 0.0);
  }
  double u = Uniform() * total;
  for (size_t i = 0; i < probs.size(); ++i) {
    u -= probs[i];
    if (u < 0) return order_[i];
  }
  return order_.back();  // rounding left u just above zero
}

}  // namespace autouvm::engine
