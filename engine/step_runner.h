// StepRunner: what the scheduler runs a model's forward passes on — one step over packed rows: the
// next token of each generating sequence (a decode row) and chunks of prompts, each row in a KV-cache
// slot of its own. ModelRunner implements it over the real model; scheduler tests implement it with a
// fake.
//
//   std::vector<StepRunner::Row> rows = {{.slot = 0, .tokens = {&next, 1}, .start_pos = 17, .decode = true},
//                                        {.slot = 3, .tokens = chunk, .start_pos = 0}};
//   RETURN_IF_ERROR(runner->Step(rows, &logits));   // one vocab_size() row of logits per row that wants one
//
// The runner takes a slot's KV-cache blocks as its sequence grows (Note [KV blocks taken as sequences
// grow], engine/kv_blocks.cc); the scheduler Releases the slot when the sequence ends. A step may also
// start a slot with another slot's blocks (KvShare: Note [Identical prompts share their prefill],
// engine/step_policy.cc):
//
//   const KvShare share{.src_slot = 0, .dst_slot = 1, .tokens = 32};   // slot 1's positions 0..31 are slot 0's
//   RETURN_IF_ERROR(runner->Step({&share, 1}, rows, &logits));
//
// Not thread-safe: one scheduler thread drives a runner.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/kv_blocks.h"
#include "profiler/iteration_hooks.h"

namespace autouvm::engine {

class StepRunner {
 public:
  struct Row {
    int32_t slot;
    absl::Span<const int32_t> tokens;  // a decode row's one token, or a prompt chunk
    int64_t start_pos = 0;             // position tokens[0] takes in the slot's sequence
    bool decode = false;               // a generating sequence's next token (exactly one)
    bool logits = true;                // its last token's logits are wanted (not for a prompt's inner chunk)
  };
  // Convenience forms (ModelRunner's Prefill and Decode).
  struct DecodeRow {
    int32_t slot;
    int32_t token;
    int64_t pos;  // position the token takes in the slot's sequence
  };
  struct PrefillRow {
    int32_t slot;
    absl::Span<const int32_t> tokens;
    int64_t start_pos = 0;  // position tokens[0] takes in the slot's sequence
  };

  virtual ~StepRunner() = default;
  // One forward pass over `rows` (Note [Packed steps], engine/llama_module.cc): writes each row's tokens
  // into its slot at positions start_pos.., each attending to its slot's positions up to its own;
  // `logits` gets vocab_size() floats for each row that wants them, in row order. A slot appears at most
  // once; positions lie within max_seq. Before the rows are packed, each of `shares` starts its dst slot
  // (empty) with its src slot's first blocks (KvBlocks::Grow with shares: a src row of this step grows
  // first, so the dst's rows attend to what the src's rows write in the same pass). Running a step again
  // (its shares made already) is safe.
  virtual absl::Status Step(absl::Span<const KvShare> shares, absl::Span<const Row> rows,
                            std::vector<float>* logits) = 0;
  // A step without shares.
  absl::Status Step(absl::Span<const Row> rows, std::vector<float>* logits) { return Step({}, rows, logits); }

  // Whether the next steps may run as captured graphs (Note [Captured steps], engine/step_graphs.cc):
  // the scheduler says so before each pass, from IterationHooks::PassMayBeCaptured.
  virtual void set_graphs_allowed(bool /*allowed*/) {}
  // The hooks asked at a decode step's launch, after its KV rows are placed, whether the observed step may
  // run as a graph with its plan's copies (IterationHooks::StagedCaptureKey), and after such a capture
  // whether its graph may be kept (StagedCaptureHeld; Note [Staged passes captured],
  // runtime/executor_capture.cc). Null: never. Not owned; they outlive the steps.
  virtual void set_staged_capture(const profiler::IterationHooks* /*hooks*/) {}
  // How the last step used such a graph (IterationHooks::RanAsGraph).
  virtual profiler::PassGraph last_pass_graph() const { return profiler::PassGraph::kNone; }
  // How the last step ran, for the scheduler's debug line: "packed", "decode", "decode: replayed", ...
  // (ModelRunner: Note [Captured steps]); empty where the runner does not say.
  virtual std::string_view last_step_form() const { return {}; }
  // Of the last step: seconds from its start until its forward pass was launched (the host's dispatch,
  // before its logits are waited for); negative where the runner does not say. Against the step's whole
  // time it tells a step the host holds up from one the device (compute, or the link's copies) does.
  virtual double last_step_launch_s() const { return -1; }

  // The slot's sequence ended: the runner may give back what it holds for it (its KV-cache blocks).
  virtual void Release(int32_t /*slot*/) {}

  virtual int max_batch() const = 0;  // KV-cache slots
  // The KV cache's blocks (Note [Block KV cache], engine/kv_blocks.cc): positions per block, and blocks
  // for all sequences together. A runner without blocks holds max_seq positions for every slot.
  virtual int64_t kv_block_tokens() const { return max_seq(); }
  virtual int64_t kv_blocks() const { return max_batch(); }
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq() const = 0;
  virtual int64_t bos_id() const = 0;  // -1: none
};

}  // namespace autouvm::engine
