#include "server/request_validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace autouvm::server {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckTokenId(const std::string& field, int64_t id, int64_t vocab) {
  if (id < 0 || id >= vocab) {
    return Bad(field, absl::StrCat("token id ", id, " is outside the model's vocabulary [0, ", vocab, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSampling(const autouvm::v1::SamplingParams& s, SamplingConfig* out) {
  if (s.has_temperature()) {
    if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
      return Bad("sampling.temperature", absl::StrCat("must be >= 0, got ", s.temperature()));
    }
    out->temperature = s.temperature();
  }
  if (s.top_k() < 0) return Bad("sampling.top_k", absl::StrCat("must be >= 0, got ", s.top_k()));
  out->top_k = s.top_k();
  if (s.has_top_p()) {
    if (!(s.top_p() > 0.0f && s.top_p() <= 1.0f)) {
      return Bad("sampling.top_p", absl::StrCat("must be in (0, 1], got ", s.top_p()));
    }
    out->top_p = s.top_p();
  }
  if (s.has_repetition_penalty()) {
    if (!std::isfinite(s.repetition_penalty()) || s.repetition_penalty() <= 0) {
      return Bad("sampling.repetition_penalty", absl::StrCat("must be > 0, got ", s.repetition_penalty()));
    }
    out->repetition_penalty = s.repetition_penalty();
  }
  return absl::OkStatus();
}

// Names the first control character (C0 or DEL) in `s`, for fields that end up in logs.
absl::Status CheckNoControl(const std::string& field, const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      return Bad(field,
                 absl::StrCat("control character 0x", absl::Hex(static_cast<int>(c), absl::kZeroPad2), " at byte ", i));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelName(const std::string& model) {
  if (model.empty()) return Bad("model", "must be set");
  if (model.size() > 256) return Bad("model", absl::StrCat("longer than 256 bytes (", model.size(), ")"));
  return CheckNoControl("model", model);
}

absl::StatusOr<GenerationParams> BuildGenerationParams(const autouvm::v1::GenerateRequest& request,
                                                       const ModelConfig& model, const Tokenizer& tokenizer,
                                                       const ModelSettings& settings, const Limits& limits,
                                                       uint64_t random_seed) {
  GenerationParams p;
  if (request.request_id().size() > 256) return Bad("request_id", "longer than 256 bytes");
  if (auto s = CheckNoControl("request_id", request.request_id()); !s.ok()) return s;
  p.request_id = request.request_id();

  switch (request.prompt_case()) {
    case autouvm::v1::GenerateRequest::kText: {
      if (request.text().empty()) return Bad("text", "the prompt is empty");
      if (static_cast<int64_t>(request.text().size()) > limits.max_prompt_bytes) {
        return Bad("text", absl::StrCat("the prompt has ", request.text().size(), " bytes, the limit is ",
                                        limits.max_prompt_bytes));
      }
      if (!request.has_add_bos() || request.add_bos()) {
        if (model.bos_id >= 0) p.prompt.push_back(static_cast<int32_t>(model.bos_id));
      }
      auto ids = tokenizer.Encode(request.text());
      if (!ids.ok()) return Bad("text", std::string(ids.status().message()));
      p.prompt.insert(p.prompt.end(), ids->begin(), ids->end());
      break;
    }
    case autouvm::v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      if (ids.empty()) return Bad("token_ids", "the prompt is empty");
      for (int i = 0; i < ids.size(); ++i) {
        if (auto s = CheckTokenId(absl::StrCat("token_ids[", i, "]"), ids[i], model.vocab_size); !s.ok()) return s;
      }
      p.prompt.assign(ids.begin(), ids.end());
      break;
    }
    default:
      return Bad("prompt", "set either text or token_ids");
  }
  if (static_cast<int64_t>(p.prompt.size()) >= model.max_seq) {
    return Bad("prompt", absl::StrCat("the prompt is ", p.prompt.size(), " tokens; the model's max_seq is ",
                                      model.max_seq, " and leaves no room to generate"));
  }

  if (request.max_tokens() > settings.max_tokens_limit) {
    return Bad("max_tokens",
               absl::StrCat("must be at most ", settings.max_tokens_limit, ", got ", request.max_tokens()));
  }
  p.max_tokens = request.max_tokens() == 0 ? static_cast<int32_t>(settings.default_max_tokens)
                                           : static_cast<int32_t>(request.max_tokens());

  if (auto s = CheckSampling(request.sampling(), &p.sampling); !s.ok()) return s;
  p.sampling.seed = request.sampling().has_seed() ? request.sampling().seed() : random_seed;

  if (request.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Bad("stop_token_ids", absl::StrCat("at most ", limits.max_stop_token_ids, " are allowed"));
  }
  for (int i = 0; i < request.stop_token_ids_size(); ++i) {
    const int32_t id = request.stop_token_ids(i);
    if (auto s = CheckTokenId(absl::StrCat("stop_token_ids[", i, "]"), id, model.vocab_size); !s.ok()) return s;
    p.stop_token_ids.push_back(id);
  }
  if (!request.ignore_eos()) {
    if (model.eos_id >= 0) p.stop_token_ids.push_back(static_cast<int32_t>(model.eos_id));
    for (const int64_t id : model.extra_eos_ids) p.stop_token_ids.push_back(static_cast<int32_t>(id));
  }

  if (request.stop_size() > limits.max_stop_strings) {
    return Bad("stop", absl::StrCat("at most ", limits.max_stop_strings, " stop strings are allowed"));
  }
  for (int i = 0; i < request.stop_size(); ++i) {
    const std::string& s = request.stop(i);
    if (s.empty()) return Bad(absl::StrCat("stop[", i, "]"), "must not be empty");
    if (static_cast<int64_t>(s.size()) > limits.max_stop_string_bytes) {
      return Bad(absl::StrCat("stop[", i, "]"), absl::StrCat("longer than ", limits.max_stop_string_bytes, " bytes"));
    }
    p.stop_strings.push_back(s);
  }
  return p;
}

}  // namespace autouvm::server
