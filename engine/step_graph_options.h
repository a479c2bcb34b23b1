// What a ModelRunner's captured decode steps are (Note [Captured steps], engine/step_graphs.cc): whether
// they are captured, which decode steps are, and what they have cost. Free of libtorch, for the runner's
// header and the daemon.
//
//   RETURN_IF_ERROR(runner->EnableStepGraphs({.mode = StepGraphMode::kDevice, .max_batch = 32}));
//   const StepGraphStats s = runner->step_graph_stats();   // from any thread
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace autouvm::engine {

// Note [Decode steps by bucket]: a step of decode rows alone computes over its bucket's shape, graphs
// or not: its rows rounded up to a power of two (to the runner's max_batch), and the span its rows
// attend over (the longest sequence's positions) to a power of two of at least kMinDecodeSpan (to
// max_seq). A padding row is token 0 at position 0, written to the null block's row 0; a short
// sequence's positions past its own are row 0 too, masked as in every step. So the step a graph replays
// is the very step the runner would run eagerly, kernel for kernel, and a model's tokens do not depend on
// whether its steps are captured (runtime.cuda_graphs). It costs the padding rows' compute and the
// masked positions' attention: at most twice the live span.
struct DecodeBucket {
  int64_t batch = 0;
  int64_t span = 0;
};
constexpr int64_t kMinDecodeSpan = 64;
inline DecodeBucket DecodeBucketOf(int64_t rows, int64_t span, int64_t max_rows, int64_t max_seq) {
  auto power_of_two = [](int64_t n) {
    int64_t p = 1;
    while (p < n) p *= 2;
    return p;
  };
  return {.batch = std::min(power_of_two(rows), max_rows),
          .span = std::min(std::max(power_of_two(span), kMinDecodeSpan), max_seq)};
}

// A decode step's inputs on the host, in the module's `step` order (Note [Packed steps],
// llama_module.cc, with no prompt rows): [tokens | positions | kv_rows: batch each | d_rows: batch x span |
// logit_ix: batch].
inline int64_t DecodeLayoutSize(DecodeBucket b) { return 4 * b.batch + b.batch * b.span; }
// Every row a padding row (zeros) whose logits are wanted (logit_ix 0..batch-1).
inline void ResetDecodeLayout(DecodeBucket b, int64_t* host) {
  std::fill(host, host + DecodeLayoutSize(b), 0);
  int64_t* logit_ix = host + 3 * b.batch + b.batch * b.span;
  for (int64_t i = 0; i < b.batch; ++i) logit_ix[i] = i;
}

enum class StepGraphMode {
  kOff,
  kDevice,    // CUDA graphs on the runner's device (runtime.cuda_graphs)
  kEmulated,  // the same buckets, static buffers and padding, but each "replay" runs the step again
              // eagerly: where no device captures (the CPU's tests of everything around the capture)
};

struct StepGraphOptions {
  StepGraphMode mode = StepGraphMode::kOff;
  // Decode steps whose bucket has more rows than this run eagerly (runtime.cuda_graph_max_batch): a
  // graph holds its activations for good, and those of a wide batch over a long span are large.
  int max_batch = 32;
};

struct StepGraphStats {
  int64_t graphs = 0;            // captured and held now
  int64_t captures = 0;          // captures that succeeded
  int64_t capture_failures = 0;  // captures that failed (admin.proto: which buckets are tried again)
  int64_t recaptures = 0;        // graphs captured again (a read tensor moved; a staged one: another key)
  int64_t replays = 0;           // decode steps run by a graph
  int64_t eager_steps = 0;       // steps run eagerly while graphs were on (not decode, not allowed, too wide)
  double capture_seconds = 0;    // spent capturing (not the eager step each capture follows)
  int64_t bytes = 0;             // device memory the captured steps hold (their activations)
  // Of the captures and replays, those of passes that follow a plan through the device buffer, their
  // copies captured with them (Note [Staged passes captured], runtime/executor_capture.cc).
  int64_t staged_captures = 0;
  int64_t staged_replays = 0;
  std::string last_error;  // why the last capture failed
};

}  // namespace autouvm::engine
