// The `generate` command's flags, and the GenerateRequest they describe.
//
// Usage: CLI11 fills a GenerateFlags (see generate_command.cc), then BuildGenerateRequest(flags) makes
// the request. Optional proto fields are set only when their flag was given, so the server's defaults
// apply otherwise; values are passed through unvalidated, and the server reports bad ones.
// Thread-safety: plain data and a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autouvm/v1/generation.pb.h"

namespace autouvm::cli {

struct GenerateFlags {
  std::string model;
  std::optional<std::string> prompt;  // exactly one of prompt and token_ids is given
  std::vector<int32_t> token_ids;
  uint32_t max_tokens = 0;  // 0: the model's default
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool no_bos = false;
  std::string request_id;
  std::optional<uint32_t> logprobs;  // unset: none
  // Output and call shape, not part of the request.
  bool unary = false;
  bool json = false;
};

autouvm::v1::GenerateRequest BuildGenerateRequest(const GenerateFlags& flags);

}  // namespace autouvm::cli
