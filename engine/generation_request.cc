#include "engine/generation_request.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace autouvm::engine {
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

// A presence or frequency penalty: OpenAI's range.
absl::Status CheckPenalty(const std::optional<float>& value, const std::string& field, float* out) {
  if (!value) return absl::OkStatus();
  if (!std::isfinite(*value) || *value < -2.0f || *value > 2.0f) {
    return Bad(field, absl::StrCat("must be in [-2, 2], got ", *value));
  }
  *out = *value;
  return absl::OkStatus();
}

absl::Status CheckSampling(const GenerationRequest& r, const FieldNames& names, SamplingConfig* out) {
  if (r.temperature) {
    if (!std::isfinite(*r.temperature) || *r.temperature < 0) {
      return Bad(names.temperature, absl::StrCat("must be >= 0, got ", *r.temperature));
    }
    out->temperature = *r.temperature;
  }
  if (r.top_k < 0) return Bad(names.top_k, absl::StrCat("must be >= 0, got ", r.top_k));
  out->top_k = r.top_k;
  if (r.top_p) {
    if (!(*r.top_p > 0.0f && *r.top_p <= 1.0f))
      return Bad(names.top_p, absl::StrCat("must be in (0, 1], got ", *r.top_p));
    out->top_p = *r.top_p;
  }
  if (r.repetition_penalty) {
    if (!std::isfinite(*r.repetition_penalty) || *r.repetition_penalty <= 0) {
      return Bad(names.repetition_penalty, absl::StrCat("must be > 0, got ", *r.repetition_penalty));
    }
    out->repetition_penalty = *r.repetition_penalty;
  }
  if (auto s = CheckPenalty(r.presence_penalty, names.presence_penalty, &out->presence_penalty); !s.ok()) return s;
  if (auto s = CheckPenalty(r.frequency_penalty, names.frequency_penalty, &out->frequency_penalty); !s.ok()) return s;
  return absl::OkStatus();
}

// Names the first control character (C0 or DEL) in `s`, for fields that end up in logs.
absl::Status CheckNoControl(const std::string& field, const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      return Bad(field,
                 absl::StrCat("control character 0x", absl::Hex(static_cast<int>(c), absl::kZeroPad2), " at byte ", i));
    }
  }
  return absl::OkStatus();
}

// The prompt's tokens, bos first where the request and the model say so.
absl::Status Prompt(const GenerationRequest& r, const GenerationTarget& t, const RequestLimits& limits,
                    const FieldNames& names, std::vector<int32_t>* prompt) {
  if (r.text.has_value() == r.token_ids.has_value()) {
    return Bad(names.prompt, absl::StrCat("set either ", names.text, " or ", names.token_ids));
  }
  if (r.text) {
    if (r.text->empty()) return Bad(names.text, "the prompt is empty");
    if (static_cast<int64_t>(r.text->size()) > limits.max_prompt_bytes) {
      return Bad(names.text,
                 absl::StrCat("the prompt has ", r.text->size(), " bytes, the limit is ", limits.max_prompt_bytes));
    }
    if (r.add_bos.value_or(true) && t.config->bos_id >= 0) prompt->push_back(static_cast<int32_t>(t.config->bos_id));
    auto ids = t.tokenizer->Encode(*r.text);
    if (!ids.ok()) return Bad(names.text, std::string(ids.status().message()));
    prompt->insert(prompt->end(), ids->begin(), ids->end());
    return absl::OkStatus();
  }
  if (r.token_ids->empty()) return Bad(names.token_ids, "the prompt is empty");
  for (size_t i = 0; i < r.token_ids->size(); ++i) {
    const int32_t id = (*r.token_ids)[i];
    if (auto s = CheckTokenId(absl::StrCat(names.token_ids, "[", i, "]"), id, t.config->vocab_size); !s.ok()) return s;
  }
  prompt->assign(r.token_ids->begin(), r.token_ids->end());
  return absl::OkStatus();
}

// Stop token ids and strings; the model's eos ids unless the request ignores them.
absl::Status Stops(const GenerationRequest& r, const ModelConfig& model, const RequestLimits& limits,
                   const FieldNames& names, GenerationParams* p) {
  if (static_cast<int64_t>(r.stop_token_ids.size()) > limits.max_stop_token_ids) {
    return Bad(names.stop_token_ids, absl::StrCat("at most ", limits.max_stop_token_ids, " are allowed"));
  }
  for (size_t i = 0; i < r.stop_token_ids.size(); ++i) {
    const int32_t id = r.stop_token_ids[i];
    if (auto s = CheckTokenId(absl::StrCat(names.stop_token_ids, "[", i, "]"), id, model.vocab_size); !s.ok()) {
      return s;
    }
    p->stop_token_ids.push_back(id);
  }
  if (!r.ignore_eos) {
    if (model.eos_id >= 0) p->stop_token_ids.push_back(static_cast<int32_t>(model.eos_id));
    for (const int64_t id : model.extra_eos_ids) p->stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  if (static_cast<int64_t>(r.stop.size()) > limits.max_stop_strings) {
    return Bad(names.stop, absl::StrCat("at most ", limits.max_stop_strings, " stop strings are allowed"));
  }
  for (size_t i = 0; i < r.stop.size(); ++i) {
    const std::string& s = r.stop[i];
    const std::string field = absl::StrCat(names.stop, "[", i, "]");
    if (s.empty()) return Bad(field, "must not be empty");
    if (static_cast<int64_t>(s.size()) > limits.max_stop_string_bytes) {
      return Bad(field, absl::StrCat("longer than ", limits.max_stop_string_bytes, " bytes"));
    }
    p->stop_strings.push_back(s);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelName(const std::string& model, const std::string& field) {
  if (model.empty()) return Bad(field, "must be set");
  if (model.size() > 256) return Bad(field, absl::StrCat("longer than 256 bytes (", model.size(), ")"));
  return CheckNoControl(field, model);
}

absl::StatusOr<GenerationParams> ValidateRequest(const GenerationRequest& request, const GenerationTarget& target,
                                                 const RequestLimits& limits, const FieldNames& names,
                                                 uint64_t random_seed) {
  GenerationParams p;
  if (request.request_id.size() > 256) return Bad(names.request_id, "longer than 256 bytes");
  if (auto s = CheckNoControl(names.request_id, request.request_id); !s.ok()) return s;
  p.request_id = request.request_id;
  if (auto s = Prompt(request, target, limits, names, &p.prompt); !s.ok()) return s;
  const ModelConfig& model = *target.config;
  if (static_cast<int64_t>(p.prompt.size()) >= model.max_seq) {
    return Bad(names.prompt, absl::StrCat("the prompt is ", p.prompt.size(), " tokens; the model's max_seq is ",
                                          model.max_seq, " and leaves no room to generate"));
  }
  if (request.max_tokens > target.max_tokens_limit) {
    return Bad(names.max_tokens,
               absl::StrCat("must be at most ", target.max_tokens_limit, ", got ", request.max_tokens));
  }
  p.max_tokens = request.max_tokens == 0 ? static_cast<int32_t>(target.default_max_tokens)
                                         : static_cast<int32_t>(request.max_tokens);
  if (auto s = CheckSampling(request, names, &p.sampling); !s.ok()) return s;
  p.sampling.seed = request.seed.value_or(random_seed);
  if (auto s = Stops(request, model, limits, names, &p); !s.ok()) return s;
  // -1 (none) is how the request says "unset", not a value a client sends: the range is the HTTP API's words.
  if (request.logprobs < -1 || request.logprobs > 20) {
    return Bad(names.logprobs, absl::StrCat("must be in [0, 20], got ", request.logprobs));
  }
  p.logprobs = static_cast<int32_t>(request.logprobs);
  p.deadline = request.deadline;
  return p;
}

}  // namespace autouvm::engine
