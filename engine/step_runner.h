// StepRunner: what the scheduler runs a model's forward passes on — a prefill of one sequence into its
// KV-cache slot, or one decode step over several slots. ModelRunner implements it over the real model;
// scheduler tests implement it with a fake.
//
//   ASSIGN_OR_RETURN(std::vector<float> logits, runner->Prefill(slot, prompt, 0));  // the last position's
//   RETURN_IF_ERROR(runner->Decode({{slot, token, pos}, ...}, &logits));            // rows × vocab_size
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

  virtual ~StepRunner() = default;
  // Writes `tokens` into `slot` at positions start_pos.. and returns the logits of the last one.
  virtual absl::StatusOr<std::vector<float>> Prefill(int32_t slot, absl::Span<const int32_t> tokens,
                                                     int64_t start_pos = 0) = 0;
  // One decode step for several slots at once; `logits` gets rows.size() × vocab_size() floats.
  virtual absl::Status Decode(absl::Span<const DecodeRow> rows, std::vector<float>* logits) = 0;

  virtual int max_batch() const = 0;  // KV-cache slots
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq() const = 0;
  virtual int64_t bos_id() const = 0;  // -1: none
};

}  // namespace autouvm::engine
