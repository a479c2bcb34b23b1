// StepRunner: what the scheduler runs a model's forward passes on — a prefill of several prompts, each
// into its KV-cache slot, or one decode step over several slots. ModelRunner implements it over the real
// model; scheduler tests implement it with a fake.
//
//   RETURN_IF_ERROR(runner->Prefill({{slot, prompt, 0}, ...}, &logits));   // rows × vocab_size: each last
//   RETURN_IF_ERROR(runner->Decode({{slot, token, pos}, ...}, &logits));   // rows × vocab_size
//
// Not thread-safe: one scheduler thread drives a runner.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace autouvm::engine {

class StepRunner {
 public:
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
  // One forward pass over several prompts, each in a slot of its own: writes each row's tokens into its
  // slot at positions start_pos..; `logits` gets rows.size() × vocab_size() floats, each row's last
  // token's. Rows are padded to the longest (Note [Padded prefill rows], engine/model_runner.cc), whose
  // positions must lie within max_seq for every row.
  virtual absl::Status Prefill(absl::Span<const PrefillRow> rows, std::vector<float>* logits) = 0;
  // One decode step for several slots at once; `logits` gets rows.size() × vocab_size() floats.
  virtual absl::Status Decode(absl::Span<const DecodeRow> rows, std::vector<float>* logits) = 0;

  virtual int max_batch() const = 0;  // KV-cache slots
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq() const = 0;
  virtual int64_t bos_id() const = 0;  // -1: none
};

}  // namespace autouvm::engine
