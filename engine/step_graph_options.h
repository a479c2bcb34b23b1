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
//
// Note [Packed steps by bucket]: a packed step (prompt chunks, with or without decode rows: Note [Packed
// steps], engine/llama_module.cc) computes over its bucket's shape too, on a GPU graphs or not (so that its
// tokens do not depend on runtime.cuda_graphs either), and on the CPU where (emulated) graphs are on; on the
// CPU without them it runs unpadded, as nothing there replays it: its decode rows and
// their span as a decode step's; its prompt rows to a power of two (to max_batch), the longest chunk
// (each row's grid of queries) and the prompt tokens all told to powers of two of at least kMinChunk, and
// the prompts' span as the decode span. A padding token is token 0 at position 0, written to row 0 as a
// padding row is; a padding prompt row's queries are packed token 0's over row 0; a real row's queries
// past its chunk repeat its last token, as they always did, and their outputs are dropped (p_flat picks
// the real tokens' outputs, and the padding tokens' any). The LM head runs at every decode row and at
// every prompt row's last token (logit_ix: batch + prompt rows), and the runner keeps those its rows want.
// A step's prompt tokens cost at most twice their compute, and the decode rows' padding as above. (On the
// CPU the unpadded form kept the mirror's plans as they were: the tiny model's padded prefill of 144 tokens
// moved 22% more bytes over its simulated link under an 8 MiB budget, its activations doubled.)
struct StepBucket {
  int64_t batch = 0;  // decode rows
  int64_t span = 0;   // the positions they attend over
  int64_t prompt_rows = 0;
  int64_t chunk = 0;          // each prompt row's tokens (its queries)
  int64_t prompt_tokens = 0;  // packed after the decode rows
  int64_t prompt_span = 0;    // the positions prompt rows attend over
  bool packed() const { return prompt_rows > 0; }
  auto operator<=>(const StepBucket&) const = default;
};
constexpr int64_t kMinDecodeSpan = 64;
constexpr int64_t kMinChunk = 16;
inline int64_t PowerOfTwoAtLeast(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
inline StepBucket DecodeBucketOf(int64_t rows, int64_t span, int64_t max_rows, int64_t max_seq) {
  return {.batch = std::min(PowerOfTwoAtLeast(rows), max_rows),
          .span = std::min(std::max(PowerOfTwoAtLeast(span), kMinDecodeSpan), max_seq)};
}
// A packed step of `decode_rows` decode rows over `decode_span` positions and `prompt_rows` prompt chunks,
// the longest `chunk` tokens, `prompt_tokens` in all, over `prompt_span` positions.
inline StepBucket PackedBucketOf(int64_t decode_rows, int64_t decode_span, int64_t prompt_rows, int64_t chunk,
                                 int64_t prompt_tokens, int64_t prompt_span, int64_t max_rows, int64_t max_seq) {
  StepBucket b = decode_rows > 0 ? DecodeBucketOf(decode_rows, decode_span, max_rows, max_seq) : StepBucket{};
  const StepBucket p = DecodeBucketOf(prompt_rows, prompt_span, max_rows, max_seq);
  b.prompt_rows = p.batch;
  b.prompt_span = p.span;
  b.chunk = std::min(std::max(PowerOfTwoAtLeast(chunk), kMinChunk), max_seq);
  b.prompt_tokens = std::max(PowerOfTwoAtLeast(prompt_tokens), kMinChunk);
  return b;
}

// A step's inputs on the host, in the module's `step` order (Note [Packed steps], llama_module.cc), as
// offsets into one int64 layout: [tokens | positions | kv_rows: batch + prompt tokens each | d_rows: batch x
// span | p_index: prompt rows x chunk | p_flat: prompt tokens | p_rows: prompt rows x prompt span |
// logit_ix: batch + prompt rows]. A decode bucket's has no prompt parts.
struct StepLayout {
  int64_t positions, kv_rows, d_rows, p_index, p_flat, p_rows, logit_ix, size;
};
inline StepLayout LayoutOf(StepBucket b) {
  const int64_t n = b.batch + b.prompt_tokens;
  StepLayout l{};
  l.positions = n;
  l.kv_rows = 2 * n;
  l.d_rows = 3 * n;
  l.p_index = l.d_rows + b.batch * b.span;
  l.p_flat = l.p_index + b.prompt_rows * b.chunk;
  l.p_rows = l.p_flat + b.prompt_tokens;
  l.logit_ix = l.p_rows + b.prompt_rows * b.prompt_span;
  l.size = l.logit_ix + b.batch + b.prompt_rows;
  return l;
}
// Every row a padding row (zeros) whose logits are wanted (logit_ix 0..batch-1, then packed token 0 for
// each prompt row).
inline void ResetStepLayout(StepBucket b, int64_t* host) {
  const StepLayout l = LayoutOf(b);
  std::fill(host, host + l.size, 0);
  for (int64_t i = 0; i < b.batch; ++i) host[l.logit_ix + i] = i;
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
  // Packed steps (prompt chunks: Note [Packed steps by bucket]) whose bucket has more prompt tokens than this
  // run eagerly (runtime.cuda_graph_max_tokens; 0: every packed step does). A packed bucket is captured at its
  // second step, not its first: a shape seen once costs no capture.
  int max_tokens = 512;
};

struct StepGraphStats {
  int64_t graphs = 0;            // captured and held now
  int64_t captures = 0;          // captures that succeeded
  int64_t capture_failures = 0;  // captures that failed (admin.proto: which buckets are tried again)
  int64_t recaptures = 0;        // graphs captured again (a read tensor moved; a staged one: another key)
  int64_t replays = 0;           // steps run by a graph
  int64_t eager_steps = 0;       // steps run eagerly while graphs were on (not allowed, too wide, a packed
                                 // bucket's first, every position's logits)
  double capture_seconds = 0;    // spent capturing (not the eager step each capture follows)
  int64_t bytes = 0;             // device memory the captured steps hold (their activations)
  // Of the captures and replays, those of passes that follow a plan through the device buffer, their
  // copies captured with them (Note [Staged passes captured], runtime/executor_capture.cc).
  int64_t staged_captures = 0;
  int64_t staged_replays = 0;
  // Of the captures and replays, those of packed steps (Note [Packed steps by bucket]).
  int64_t packed_captures = 0;
  int64_t packed_replays = 0;
  std::string last_error;  // why the last capture failed
};

}  // namespace autouvm::engine
