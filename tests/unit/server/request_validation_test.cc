// BuildGenerationParams: one test per rejected field (INVALID_ARGUMENT, message starting with the field),
// then the defaults and conversions of a valid request; then engine::ValidateRequest's own request as the
// HTTP API fills it. The tiny default model and the byte tokenizer; no model file is needed.
#include "server/request_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/llama_builder.h"

namespace autouvm::server {
namespace {

using ::testing::ElementsAre;
using ::testing::StartsWith;

class RequestValidationTest : public ::testing::Test {
 protected:
  RequestValidationTest()
      : model_(engine::DefaultTinyModelConfig("tiny")), tok_(model_.vocab_size, model_.bos_id, model_.eos_id) {
    request_.set_text("hi");
  }

  absl::StatusOr<engine::GenerationParams> Build(uint64_t random_seed = 12345) {
    return BuildGenerationParams(request_, model_, tok_, settings_, limits_, random_seed);
  }

  // Expects INVALID_ARGUMENT with a message that starts with "<field>:".
  void ExpectBad(const std::string& field) {
    auto p = Build();
    ASSERT_FALSE(p.ok()) << "accepted a request with a bad " << field;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), StartsWith(field + ":"));
  }

  engine::ModelConfig model_;  // vocab 320, bos 256, eos 257, max_seq 512
  tokenizer::ByteTokenizer tok_;
  ModelSettings settings_;
  Limits limits_;
  autouvm::v1::GenerateRequest request_;
};

// --- Rejections ----------------------------------------------------------------------------------------

TEST_F(RequestValidationTest, MissingPrompt) {
  request_.clear_prompt();
  ExpectBad("prompt");
}

TEST_F(RequestValidationTest, EmptyText) {
  request_.set_text("");
  ExpectBad("text");
}

TEST_F(RequestValidationTest, TextOverMaxPromptBytes) {
  limits_.max_prompt_bytes = 8;
  request_.set_text("123456789");
  ExpectBad("text");
}

TEST_F(RequestValidationTest, EmptyTokenIds) {
  request_.mutable_token_ids();
  ExpectBad("token_ids");
}

TEST_F(RequestValidationTest, TokenIdOutOfVocabulary) {
  request_.mutable_token_ids()->add_ids(5);
  request_.mutable_token_ids()->add_ids(320);
  ExpectBad("token_ids[1]");
}

TEST_F(RequestValidationTest, NegativeTokenId) {
  request_.mutable_token_ids()->add_ids(5);
  request_.mutable_token_ids()->add_ids(6);
  request_.mutable_token_ids()->add_ids(-1);
  ExpectBad("token_ids[2]");
}

TEST_F(RequestValidationTest, TextPromptFillingMaxSeq) {
  request_.set_text(std::string(511, 'a'));  // + bos = 512 = max_seq: no room to generate
  ExpectBad("prompt");
}

TEST_F(RequestValidationTest, TokenPromptFillingMaxSeq) {
  for (int i = 0; i < 512; ++i) request_.mutable_token_ids()->add_ids('a');
  ExpectBad("prompt");
}

TEST_F(RequestValidationTest, MaxTokensOverLimit) {
  settings_.max_tokens_limit = 100;
  request_.set_max_tokens(101);
  ExpectBad("max_tokens");
}

TEST_F(RequestValidationTest, NegativeTemperature) {
  request_.mutable_sampling()->set_temperature(-0.5f);
  ExpectBad("sampling.temperature");
}

TEST_F(RequestValidationTest, NanTemperature) {
  request_.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  ExpectBad("sampling.temperature");
}

TEST_F(RequestValidationTest, InfiniteTemperature) {
  request_.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  ExpectBad("sampling.temperature");
}

TEST_F(RequestValidationTest, ZeroTopP) {
  request_.mutable_sampling()->set_top_p(0.0f);
  ExpectBad("sampling.top_p");
}

TEST_F(RequestValidationTest, TopPAboveOne) {
  request_.mutable_sampling()->set_top_p(1.5f);
  ExpectBad("sampling.top_p");
}

TEST_F(RequestValidationTest, NanTopP) {
  request_.mutable_sampling()->set_top_p(std::numeric_limits<float>::quiet_NaN());
  ExpectBad("sampling.top_p");
}

TEST_F(RequestValidationTest, NegativeTopK) {
  request_.mutable_sampling()->set_top_k(-1);
  ExpectBad("sampling.top_k");
}

TEST_F(RequestValidationTest, ZeroRepetitionPenalty) {
  request_.mutable_sampling()->set_repetition_penalty(0.0f);
  ExpectBad("sampling.repetition_penalty");
}

TEST_F(RequestValidationTest, NegativeRepetitionPenalty) {
  request_.mutable_sampling()->set_repetition_penalty(-1.2f);
  ExpectBad("sampling.repetition_penalty");
}

TEST_F(RequestValidationTest, PresencePenaltyAboveTwo) {
  request_.mutable_sampling()->set_presence_penalty(2.5f);
  ExpectBad("sampling.presence_penalty");
}

TEST_F(RequestValidationTest, PresencePenaltyInfinite) {
  request_.mutable_sampling()->set_presence_penalty(-std::numeric_limits<float>::infinity());
  ExpectBad("sampling.presence_penalty");
}

TEST_F(RequestValidationTest, FrequencyPenaltyBelowMinusTwo) {
  request_.mutable_sampling()->set_frequency_penalty(-2.01f);
  ExpectBad("sampling.frequency_penalty");
}

TEST_F(RequestValidationTest, NanFrequencyPenalty) {
  request_.mutable_sampling()->set_frequency_penalty(std::numeric_limits<float>::quiet_NaN());
  ExpectBad("sampling.frequency_penalty");
}

TEST_F(RequestValidationTest, StopTokenIdOutOfVocabulary) {
  request_.add_stop_token_ids(1000);
  ExpectBad("stop_token_ids[0]");
}

TEST_F(RequestValidationTest, TooManyStopTokenIds) {
  limits_.max_stop_token_ids = 2;
  for (int id : {1, 2, 3}) request_.add_stop_token_ids(id);
  ExpectBad("stop_token_ids");
}

TEST_F(RequestValidationTest, TooManyStopStrings) {
  limits_.max_stop_strings = 2;
  for (const char* s : {"a", "b", "c"}) request_.add_stop(s);
  ExpectBad("stop");
}

TEST_F(RequestValidationTest, EmptyStopString) {
  request_.add_stop("");
  ExpectBad("stop[0]");
}

TEST_F(RequestValidationTest, OverLongStopString) {
  limits_.max_stop_string_bytes = 4;
  request_.add_stop("ok");
  request_.add_stop("abcde");
  ExpectBad("stop[1]");
}

TEST_F(RequestValidationTest, OverLongRequestId) {
  request_.set_request_id(std::string(257, 'r'));
  ExpectBad("request_id");
}

// --- Accepted requests ---------------------------------------------------------------------------------

TEST_F(RequestValidationTest, TextPromptGetsBosPrepended) {
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->prompt, ElementsAre(256, 'h', 'i'));
  request_.set_add_bos(true);
  p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->prompt, ElementsAre(256, 'h', 'i'));
}

TEST_F(RequestValidationTest, AddBosFalseLeavesBosOut) {
  request_.set_add_bos(false);
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->prompt, ElementsAre('h', 'i'));
}

TEST_F(RequestValidationTest, TokenPromptIsTakenAsIs) {
  request_.mutable_token_ids()->add_ids(256);
  request_.mutable_token_ids()->add_ids(319);
  request_.mutable_token_ids()->add_ids(0);
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->prompt, ElementsAre(256, 319, 0));
}

TEST_F(RequestValidationTest, LongestPromptThatLeavesRoomIsAccepted) {
  request_.set_text(std::string(510, 'a'));  // + bos = 511 < 512
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt.size(), 511u);
}

TEST_F(RequestValidationTest, MaxTokensZeroMeansDefault) {
  settings_.default_max_tokens = 77;
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_tokens, 77);
  request_.set_max_tokens(settings_.max_tokens_limit);  // the limit itself is allowed
  p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_tokens, settings_.max_tokens_limit);
}

TEST_F(RequestValidationTest, EosIsAppendedToStopTokensUnlessIgnored) {
  request_.add_stop_token_ids(5);
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->stop_token_ids, ElementsAre(5, 257));
  request_.set_ignore_eos(true);
  p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->stop_token_ids, ElementsAre(5));
}

TEST_F(RequestValidationTest, SeedDefaultsToTheRandomSeedArgument) {
  auto p = Build(/*random_seed=*/987654321);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.seed, 987654321u);
  request_.mutable_sampling()->set_seed(7);
  p = Build(987654321);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.seed, 7u);
  request_.mutable_sampling()->set_seed(0);  // explicitly 0 is a seed, not "unset"
  p = Build(987654321);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.seed, 0u);
}

TEST_F(RequestValidationTest, SamplingDefaultsAndExplicitValues) {
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FLOAT_EQ(p->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p->sampling.top_p, 1.0f);
  EXPECT_EQ(p->sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p->sampling.repetition_penalty, 1.0f);

  auto* s = request_.mutable_sampling();
  s->set_temperature(0.0f);  // greedy is valid
  s->set_top_p(1.0f);
  s->set_top_k(40);
  s->set_repetition_penalty(1.3f);
  p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FLOAT_EQ(p->sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p->sampling.top_p, 1.0f);
  EXPECT_EQ(p->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p->sampling.repetition_penalty, 1.3f);
}

TEST_F(RequestValidationTest, PenaltiesDefaultToOffAndTheirBoundsAreAccepted) {
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.presence_penalty, 0.0f);
  EXPECT_EQ(p->sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(p->logprobs, -1);
  request_.mutable_sampling()->set_presence_penalty(-2.0f);
  request_.mutable_sampling()->set_frequency_penalty(2.0f);
  p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.presence_penalty, -2.0f);
  EXPECT_EQ(p->sampling.frequency_penalty, 2.0f);
}

TEST_F(RequestValidationTest, LogprobsAboveTwentyAreRefusedWithTheLimit) {
  request_.set_logprobs(21);
  ExpectBad("logprobs");
  EXPECT_EQ(Build().status().message(), "logprobs: must be in [0, 20], got 21");
  // The largest uint32 is refused as it was sent, not wrapped into -1 (none) on its way to the engine.
  request_.set_logprobs(std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(Build().status().message(), "logprobs: must be in [0, 20], got 4294967295");
}

TEST_F(RequestValidationTest, LogprobsUnsetAreNoneAndZeroToTwentyAreCopied) {
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->logprobs, -1);
  for (uint32_t n : {0u, 3u, 20u}) {
    request_.set_logprobs(n);
    p = Build();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->logprobs, static_cast<int32_t>(n));
  }
}

// The engine's own request, as the HTTP API fills it.
class EngineRequestTest : public RequestValidationTest {
 protected:
  absl::StatusOr<engine::GenerationParams> Validate(const engine::GenerationRequest& r) {
    const engine::GenerationTarget target{.name = "tiny", .config = &model_, .tokenizer = &tok_};
    return engine::ValidateRequest(r, target, engine::RequestLimits{}, names_, 1);
  }
  void ExpectRejected(const engine::GenerationRequest& r, const std::string& field) {
    auto p = Validate(r);
    ASSERT_FALSE(p.ok()) << "accepted a request with a bad " << field;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), StartsWith(field + ":"));
  }
  engine::FieldNames names_{.presence_penalty = "presence_penalty", .frequency_penalty = "frequency_penalty"};
  engine::GenerationRequest req_{.model = "tiny", .text = "hi"};
};

TEST_F(EngineRequestTest, LogprobsOutsideMinusOneToTwenty) {
  req_.logprobs = 21;
  ExpectRejected(req_, "logprobs");
  req_.logprobs = -2;
  ExpectRejected(req_, "logprobs");
}

TEST_F(EngineRequestTest, PenaltiesAreNamedInTheTransportsSpelling) {
  req_.presence_penalty = 3.0f;
  ExpectRejected(req_, "presence_penalty");
  req_.presence_penalty.reset();
  req_.frequency_penalty = -3.0f;
  ExpectRejected(req_, "frequency_penalty");
}

TEST_F(EngineRequestTest, LogprobsAndPenaltiesAreCopied) {
  for (int32_t n : {-1, 0, 20}) {
    req_.logprobs = n;
    req_.presence_penalty = 0.5f;
    req_.frequency_penalty = -1.5f;
    auto p = Validate(req_);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->logprobs, n);
    EXPECT_EQ(p->sampling.presence_penalty, 0.5f);
    EXPECT_EQ(p->sampling.frequency_penalty, -1.5f);
  }
}

TEST_F(RequestValidationTest, StopStringsAndRequestIdAreCopied) {
  request_.add_stop("\n\n");
  request_.add_stop("END");
  request_.set_request_id(std::string(256, 'r'));  // exactly the limit
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->stop_strings, ElementsAre("\n\n", "END"));
  EXPECT_EQ(p->request_id, std::string(256, 'r'));
}

}  // namespace
}  // namespace autouvm::server
