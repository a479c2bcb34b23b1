// sampler_bench: what greedy sampling costs per row on the scheduler's thread: ArgMax in blocks
// (engine/sampler.cc) against the plain loop it replaced, over logits like a model's (normal, with one
// clear winner now and then), for vocabularies of Llama 2 (32000), Mistral-Nemo (131072) and Llama 3
// (128256). The scheduler runs it for every row of every pass.
//
//   build/bench/sampler_bench [--rows 20000]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

// The loop ArgMax was before the blocks.
int32_t PlainArgMax(const std::vector<float>& v) {
  float best_value = v[0];
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > best_value) {
      best_value = v[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

template <typename F>
double MicrosPerRow(const std::vector<std::vector<float>>& rows, int reps, F f, int64_t* checksum) {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    for (const auto& row : rows) *checksum += f(row);
  }
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  return took.count() / (static_cast<double>(reps) * static_cast<double>(rows.size()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"greedy sampling per row: ArgMax in blocks against the plain loop"};
  int total_rows = 20000;
  app.add_option("--rows", total_rows, "rows timed per vocabulary and form");
  CLI11_PARSE(app, argc, argv);
  std::printf("| vocabulary | plain loop us/row | blocks us/row | speed-up | same tokens |\n|---|---|---|---|---|\n");
  for (const size_t vocab : {size_t{32000}, size_t{128256}, size_t{131072}}) {
    std::mt19937 rng(11);
    std::normal_distribution<float> logit(0.0f, 2.0f);
    std::uniform_int_distribution<size_t> at(0, vocab - 1);
    std::vector<std::vector<float>> rows(64, std::vector<float>(vocab));
    for (size_t r = 0; r < rows.size(); ++r) {
      for (float& x : rows[r]) x = logit(rng);
      if (r % 2 == 0) rows[r][at(rng)] = 25.0f;  // a confident step
    }
    bool same = true;
    for (const auto& row : rows) same = same && autouvm::engine::ArgMax(row) == PlainArgMax(row);
    const int reps = std::max(1, total_rows / static_cast<int>(rows.size()));
    int64_t checksum = 0;
    const double plain = MicrosPerRow(rows, reps, PlainArgMax, &checksum);
    const double blocks = MicrosPerRow(
        rows, reps, [](const std::vector<float>& v) { return autouvm::engine::ArgMax(v); }, &checksum);
    std::printf("| %zu | %.2f | %.2f | %.2fx | %s |\n", vocab, plain, blocks, plain / blocks, same ? "yes" : "NO");
    if (checksum == 42) std::printf("\n");  // keeps the calls
  }
  return 0;
}
