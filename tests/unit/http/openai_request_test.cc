// The OpenAI request parser (http/openai_request.h), the error objects (http/openai_response.h) and the
// API key check (http/api_keys.h).
#include "http/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "http/api_keys.h"
#include "http/openai_response.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::http {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<OpenAiRequest> Completions(const std::string& body) {
  return ParseOpenAiRequest(Endpoint::kCompletions, body);
}
absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(Endpoint::kChatCompletions, body);
}

// The message of a refusal, which must be INVALID_ARGUMENT.
std::string Refusal(const absl::StatusOr<OpenAiRequest>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return std::string(r.status().message());
}

TEST(OpenAiRequestTest, ACompletionRequestMapsEveryFieldOntoTheEngineRequest) {
  auto r = Completions(R"({"model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "seed": 42, "stop": ["\n", "END"], "n": 3, "logprobs": 2, "presence_penalty": 0.5, "frequency_penalty": -1,
      "top_k": 40, "repetition_penalty": 1.1, "ignore_eos": true, "user": "u1", "echo": false, "stream": true,
      "stream_options": {"include_usage": true}, "best_of": 1, "suffix": null, "logit_bias": {}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const engine::GenerationRequest& g = r->generation;
  EXPECT_EQ(g.model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r->prompts[0]), "Hello");
  EXPECT_EQ(g.max_tokens, 7u);
  EXPECT_FLOAT_EQ(*g.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.9f);
  EXPECT_EQ(*g.seed, 42u);
  EXPECT_TRUE(r->seeded);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(g.logprobs, 2);
  EXPECT_FLOAT_EQ(*g.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(*g.frequency_penalty, -1.0f);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_FLOAT_EQ(*g.repetition_penalty, 1.1f);
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->names.temperature, "temperature");
  EXPECT_EQ(r->names.text, "prompt");
}

TEST(OpenAiRequestTest, PromptsComeAsTextTokenIdsOrListsOfEither) {
  auto ids = Completions(R"({"model": "m", "prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids->prompts[0]), (std::vector<int32_t>{1, 2, 3}));
  auto many = Completions(R"({"model": "m", "prompt": ["a", [4, 5]], "n": 2})");
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(many->prompts[0]), "a");
  EXPECT_EQ(std::get<std::vector<int32_t>>(many->prompts[1]), (std::vector<int32_t>{4, 5}));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": [1, -2]})")), HasSubstr("prompt[1]: must be in"));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": []})")), HasSubstr("prompt: the prompt is empty"));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": [true]})")), HasSubstr("prompt[0]: must be a string"));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m"})")), HasSubstr("prompt: is required"));
}

TEST(OpenAiRequestTest, ChatMessagesKeepTheirOrderAndJoinTextParts) {
  auto r = Chat(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}], "name": "ann"},
      {"role": "assistant", "content": null, "tool_calls": []}],
      "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 4, "add_generation_prompt": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0]["role"], "system");
  EXPECT_EQ(r->messages[1]["content"], "Hello");
  EXPECT_EQ(r->messages[1]["name"], "ann");
  EXPECT_EQ(r->messages[1].begin().key(), "role");
  EXPECT_EQ(r->messages[2]["content"], "");
  EXPECT_EQ(r->generation.max_tokens, 5u);
  EXPECT_EQ(r->names.max_tokens, "max_completion_tokens");
  EXPECT_EQ(r->generation.logprobs, 4);
  EXPECT_FALSE(r->add_generation_prompt);
  auto plain = Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": false})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->generation.logprobs, -1);
  auto only_token = Chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  ASSERT_TRUE(only_token.ok()) << only_token.status();
  EXPECT_EQ(only_token->generation.logprobs, 0);
}

TEST(OpenAiRequestTest, WhatThisServerDoesNotImplementIsRefusedNamingTheField) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case {
    std::string body, field;
  };
  const std::vector<Case> cases = {
      {R"({"model": "m", )" + user + R"(, "tools": [{"type": "function"}]})", "tools"},
      {R"({"model": "m", )" + user + R"(, "response_format": {"type": "json_object"}})", "response_format"},
      {R"({"model": "m", )" + user + R"(, "tool_choice": "auto"})", "tool_choice"},
      {R"({"model": "m", )" + user + R"(, "frobnicate": 1})", "frobnicate"},
      {R"({"model": "m", )" + user + R"(, "logit_bias": {"5": 10}})", "logit_bias"},
      {R"({"model": "m", )" + user + R"(, "stream_options": {"include_usage": true, "x": 1}})", "stream_options.x"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})", "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"model": "m", "messages": []})", "messages"},
      {R"({"model": "m", )" + user + R"(, "top_logprobs": 2})", "top_logprobs"},
      {R"({"model": "m", )" + user + R"(, "temperature": 2.5})", "temperature"},
      {R"({"model": "m", )" + user + R"(, "temperature": "hot"})", "temperature"},
      {R"({"model": "m", )" + user + R"(, "top_p": 0})", "top_p"},
      {R"({"model": "m", )" + user + R"(, "n": 0})", "n"},
      {R"({"model": "m", )" + user + R"(, "n": 1.5})", "n"},
      {R"({"model": "m", )" + user + R"(, "presence_penalty": 3})", "presence_penalty"},
      {R"({"model": "m", )" + user + R"(, "stop": [1]})", "stop[0]"},
      {R"({"model": "m", )" + user + R"(, "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"model": "m", )" + user + R"(, "prompt": "x"})", "prompt"},
      {R"({)" + user + R"(})", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const std::string message = Refusal(Chat(c.body));
    EXPECT_EQ(FieldOfMessage(message), c.field) << message;
  }
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": "x", "echo": true})")), HasSubstr("echo"));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": "x", "best_of": 2})")), HasSubstr("best_of"));
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": "x", "messages": []})")), HasSubstr("messages"));
}

TEST(OpenAiRequestTest, NullMeansUnsetAndBodiesThatAreNotObjectsAreRefused) {
  auto r = Completions(R"({"model": "m", "prompt": "x", "temperature": null, "stop": null, "n": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generation.temperature.has_value());
  EXPECT_EQ(r->n, 1);
  EXPECT_THAT(Refusal(Completions("{\"model\": ")), HasSubstr("not JSON"));
  EXPECT_THAT(Refusal(Completions("[1, 2]")), HasSubstr("must be a JSON object"));
  // A number past a double's range (the fuzzer's find: nlohmann throws out_of_range, not parse_error).
  EXPECT_THAT(Refusal(Completions(R"({"model": "m", "prompt": "x", "temperature": 6e6666})")), HasSubstr("JSON"));
  // Bytes that are not UTF-8 are refused, and the error object that names them is still JSON text.
  const auto bad = Completions("{\"model\": \"\xff\"}");
  EXPECT_THAT(Refusal(bad), HasSubstr("not JSON"));
  EXPECT_TRUE(Json::accept(ErrorReply(bad.status()).body));
  OpenAiLimits limits;
  limits.max_choices = 8;
  EXPECT_THAT(
      Refusal(ParseOpenAiRequest(Endpoint::kCompletions, R"({"model": "m", "prompt": ["a", "b"], "n": 5})", limits)),
      HasSubstr("prompts x n is 10"));
}

TEST(OpenAiResponseTest, ErrorsCarryOpenAisStatusTypeParamAndCode) {
  struct Case {
    absl::Status status;
    int http;
    std::string type;
  };
  const std::vector<Case> cases = {
      {absl::InvalidArgumentError("top_p: must be in (0, 1], got 2"), 400, "invalid_request_error"},
      {absl::UnauthenticatedError("Incorrect API key provided"), 401, "authentication_error"},
      {absl::NotFoundError("model 'x' is not served"), 404, "invalid_request_error"},
      {absl::ResourceExhaustedError("the queue is full"), 429, "rate_limit_error"},
      {absl::UnavailableError("the model is loading"), 503, "service_unavailable"},
      {absl::InternalError("boom"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    const Reply r = ErrorReply(c.status);
    EXPECT_EQ(r.status, c.http) << c.status;
    const Json e = Json::parse(r.body)["error"];
    EXPECT_EQ(e["message"], std::string(c.status.message()));
    EXPECT_EQ(e["type"], c.type);
  }
  EXPECT_EQ(Json::parse(ErrorReply(cases[0].status).body)["error"]["param"], "top_p");
  EXPECT_TRUE(Json::parse(ErrorReply(absl::InvalidArgumentError("the body is bad")).body)["error"]["param"].is_null());
  EXPECT_EQ(Json::parse(ErrorReply(cases[2].status).body)["error"]["code"], "model_not_found");
}

TEST(ApiKeysTest, OnlyABearerOfAKeyInTheFileIsAccepted) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("keys")) << "# comment\n\n  sk-one  \nsk-two\n";
  auto keys = ReadApiKeyFile(dir.Sub("keys"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{"sk-one", "sk-two"}));
  EXPECT_TRUE(ApiKeyAccepted(*keys, "Bearer sk-one"));
  EXPECT_TRUE(ApiKeyAccepted(*keys, "bearer sk-two"));
  EXPECT_FALSE(ApiKeyAccepted(*keys, "Bearer sk-on"));
  EXPECT_FALSE(ApiKeyAccepted(*keys, "Bearer sk-one2"));
  EXPECT_FALSE(ApiKeyAccepted(*keys, "sk-one"));
  EXPECT_FALSE(ApiKeyAccepted(*keys, "Basic sk-one"));
  EXPECT_FALSE(ApiKeyAccepted(*keys, ""));
  std::ofstream(dir.Sub("empty")) << "# nothing\n";
  EXPECT_THAT(std::string(ReadApiKeyFile(dir.Sub("empty")).status().message()), HasSubstr("holds no key"));
  std::ofstream(dir.Sub("spaced")) << "sk a\n";
  EXPECT_THAT(std::string(ReadApiKeyFile(dir.Sub("spaced")).status().message()), HasSubstr("line 1"));
  EXPECT_THAT(std::string(ReadApiKeyFile(dir.Sub("missing")).status().message()), HasSubstr("server.api_key_file"));
}

}  // namespace
}  // namespace autouvm::http
