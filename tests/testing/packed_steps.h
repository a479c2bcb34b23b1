// Packed steps of every kind for two runners side by side (Note [Packed steps by bucket],
// engine/step_graph_options.h): tests/integration/step_graphs_test.cc runs them with emulated graphs on the
// CPU, tests/gpu/managed_memory_test.cc as CUDA graphs.
//
//   testing::PackedSteps run = testing::PrefilledBuckets(prompt_lengths, max_batch, max_seq);
//   const testing::PackedSteps before = run;
//   testing::RunPackedSteps(eager.get(), graphs.get(), len, 36, max_batch, max_seq, vocab, &run);
//   EXPECT_EQ(stats.packed_replays, run.Replays() - before.Replays());
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/step_graph_options.h"

namespace autouvm::testing {

struct PackedSteps {
  std::map<engine::StepBucket, int> buckets;  // the steps each bucket ran
  // What a bucket's steps come to with graphs on: its first eager, its second captured, the rest replayed.
  int64_t Captures() const {
    int64_t n = 0;
    for (const auto& [bucket, steps] : buckets) n += steps >= 2 ? 1 : 0;
    return n;
  }
  int64_t Replays() const {
    int64_t n = 0;
    for (const auto& [bucket, steps] : buckets) n += std::max(steps - 2, 0);
    return n;
  }
};

// The buckets of prompts of `lengths` prefilled one by one.
inline PackedSteps PrefilledBuckets(const std::vector<int64_t>& lengths, int64_t max_batch, int64_t max_seq) {
  PackedSteps out;
  for (const int64_t len : lengths) ++out.buckets[engine::PackedBucketOf(0, 0, 1, len, len, len, max_batch, max_seq)];
  return out;
}

// `steps` packed steps, the same on both runners, their buckets counted into `run`: 0-3 decode rows of slots
// 0..2 (their sequences' lengths in `len`, their next tokens those the eager logits choose) and 1-3 prompt chunks of 3,
// 5 or 12 tokens fed into slots 5..7 (a 40-token prompt each, started again when whole), every other chunk wanting no
// logits, the prompt rows first on odd steps. EXPECTs each step's logits to be the same floats on both.
inline void RunPackedSteps(engine::ModelRunner* eager, engine::ModelRunner* graphs, std::vector<int64_t> len, int steps,
                           int64_t max_batch, int64_t max_seq, int64_t vocab, PackedSteps* run) {
  using Row = engine::StepRunner::Row;
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 13) % 250 + 1);
  std::vector<int32_t> next(3);  // each decoding slot's next token
  for (size_t slot = 0; slot < next.size(); ++slot) next[slot] = static_cast<int32_t>(17 + slot);
  int64_t fed[3] = {0, 0, 0};  // of slots 5, 6, 7: their prompt's tokens fed so far
  const auto V = static_cast<size_t>(vocab);
  auto chunk_of = [](int step, int j) { return std::vector<int64_t>{5, 12, 3}[static_cast<size_t>((step + j) % 3)]; };
  for (int step = 0; step < steps; ++step) {
    std::vector<Row> rows;
    const int nd = step % 4;  // 0: prompts alone
    int64_t d_span = 0, tp = 0, np = 0, p_span = 0;
    for (int i = 0; i < nd; ++i) {
      const auto slot = static_cast<int32_t>((step + i) % 3);
      const auto s = static_cast<size_t>(slot);
      rows.push_back({.slot = slot, .tokens = {&next[s], 1}, .start_pos = len[s], .decode = true});
      d_span = std::max(d_span, len[s] + 1);
    }
    const int rp = step % 3 + 1;
    for (int j = 0; j < rp; ++j) {
      const int64_t chunk = chunk_of(step, j);
      if (fed[j] + chunk > static_cast<int64_t>(prompt.size())) {  // whole: the slot starts again
        eager->Release(5 + j);
        graphs->Release(5 + j);
        fed[j] = 0;
      }
      rows.push_back({.slot = 5 + j,
                      .tokens = {prompt.data() + fed[j], static_cast<size_t>(chunk)},
                      .start_pos = fed[j],
                      .logits = (step + j) % 2 == 0});
      tp = std::max(tp, chunk);
      np += chunk;
      p_span = std::max(p_span, fed[j] + chunk);
    }
    if (step % 2 == 1) std::rotate(rows.begin(), rows.begin() + nd, rows.end());  // prompts first
    size_t wanted = 0;
    for (const Row& r : rows) wanted += r.logits ? 1 : 0;
    std::vector<float> want, got;
    EXPECT_TRUE(eager->Step(rows, &want).ok()) << "step " << step;
    EXPECT_TRUE(graphs->Step(rows, &got).ok()) << "step " << step;
    EXPECT_EQ(want.size(), wanted * V) << "step " << step;
    EXPECT_EQ(got.size(), want.size()) << "step " << step;
    if (got.size() != want.size() || want.size() != wanted * V) return;
    int64_t differing = 0;
    for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i] ? 1 : 0;
    EXPECT_EQ(differing, 0) << "step " << step << " (" << graphs->last_step_form() << ")";
    ++run->buckets[engine::PackedBucketOf(nd, d_span, rp, tp, np, p_span, max_batch, max_seq)];
    size_t at = 0;  // the logit rows, in the order of `rows`
    for (const Row& r : rows) {
      if (!r.logits) continue;
      const auto first = want.begin() + static_cast<std::ptrdiff_t>(at * V);
      const auto best = std::max_element(first, first + static_cast<std::ptrdiff_t>(V)) - first;
      if (r.decode) {
        next[static_cast<size_t>(r.slot)] = static_cast<int32_t>(best);
        ++len[static_cast<size_t>(r.slot)];
      }
      ++at;
    }
    for (int j = 0; j < rp; ++j) fed[j] += chunk_of(step, j);
  }
}

}  // namespace autouvm::testing
