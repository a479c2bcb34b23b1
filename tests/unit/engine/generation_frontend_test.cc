// GenerationFrontend and GenerationCall: the engine's front door, with a model directory of the test's
// own and a real scheduler over the tiny model (engine/generation_frontend.h).
#include "engine/generation_frontend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "tests/testing/recording_sink.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::engine {
namespace {

using autouvm::testing::RecordingSink;
using ::testing::HasSubstr;

class FakeDirectory final : public ModelDirectory {
 public:
  absl::StatusOr<GenerationTarget> ReadyTarget(const std::string& name) const override {
    if (absl::Status s = CheckModelName(name); !s.ok()) return s;
    auto it = models_.find(name);
    if (it == models_.end()) return absl::NotFoundError("model '" + name + "' is not served");
    if (!it->second.ok()) return it->second.status();
    return *it->second;
  }
  std::vector<Listing> ListModels() const override {
    std::vector<Listing> out;
    for (const auto& [name, target] : models_) out.push_back({.name = name, .ready = target.ok()});
    return out;
  }
  std::map<std::string, absl::StatusOr<GenerationTarget>> models_;
};

class GenerationFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = DefaultTinyModelConfig("tiny");
    ASSERT_TRUE(WriteLlamaModel(config_, 3, dir_.path()).ok());
    auto runner = ModelRunner::Create(dir_.Sub("tiny"), config_, 2);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    tokenizer_ = std::make_unique<tokenizer::ByteTokenizer>(config_.vocab_size, config_.bos_id, config_.eos_id);
    scheduler_ =
        std::make_unique<Scheduler>(runner_.get(), tokenizer_.get(), SchedulerOptions{.max_batch = 2}, &clock_);
    models_.models_.emplace("tiny", GenerationTarget{.name = "tiny",
                                                     .config = &config_,
                                                     .tokenizer = tokenizer_.get(),
                                                     .scheduler = scheduler_.get(),
                                                     .default_max_tokens = 5,
                                                     .max_tokens_limit = 64});
    models_.models_.emplace("loading", absl::UnavailableError("model 'loading' is still loading"));
  }

  GenerationRequest Request(const std::string& text, uint32_t max_tokens) {
    return {.model = "tiny", .text = text, .max_tokens = max_tokens, .ignore_eos = true, .temperature = 0.0f};
  }

  autouvm::testing::TempDir dir_;
  ModelConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  base::RealClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  FakeDirectory models_;
  ServingGate gate_;
  FieldNames grpc_;
};

TEST_F(GenerationFrontendTest, AnAdmittedRequestRunsToItsSinkWithAnId) {
  GenerationFrontend frontend(&models_, {}, &gate_);
  RecordingSink sink;
  GenerationCall call(&frontend);
  ASSERT_TRUE(call.Submit(Request("Hello", 4), grpc_, &sink).ok());
  EXPECT_EQ(call.model(), "tiny");
  EXPECT_THAT(call.request_id(), ::testing::MatchesRegex("req-[0-9a-f]{16}"));
  sink.done.WaitForNotification();
  EXPECT_TRUE(sink.Result().status.ok()) << sink.Result().status;
  EXPECT_EQ(sink.Tokens().size(), 4u);
  EXPECT_EQ(sink.Result().prompt_tokens, 6);  // bos + 5 bytes
}

TEST_F(GenerationFrontendTest, TheModelsDefaultMaxTokensAndTheRequestsOwnId) {
  GenerationFrontend frontend(&models_, {});
  RecordingSink sink;
  GenerationCall call(&frontend);
  GenerationRequest r = Request("Hi", 0);
  r.request_id = "mine-1";
  ASSERT_TRUE(call.Submit(std::move(r), grpc_, &sink).ok());
  EXPECT_EQ(call.request_id(), "mine-1");
  sink.done.WaitForNotification();
  EXPECT_EQ(sink.Tokens().size(), 5u);  // default_max_tokens
}

TEST_F(GenerationFrontendTest, RefusalsNeverReachTheSink) {
  GenerationFrontend frontend(&models_, {.max_prompt_bytes = 8}, &gate_);
  struct Case {
    GenerationRequest request;
    std::string defect;
    absl::StatusCode code;
    std::string says;
  };
  GenerationRequest unknown = Request("x", 1), loading = Request("x", 1), unnamed = Request("x", 1);
  unknown.model = "nope";
  loading.model = "loading";
  unnamed.model = "";
  GenerationRequest both = Request("x", 1);
  both.token_ids = std::vector<int32_t>{1};
  const std::vector<Case> cases = {
      {unknown, "", absl::StatusCode::kNotFound, "model 'nope' is not served"},
      {loading, "", absl::StatusCode::kUnavailable, "still loading"},
      {unnamed, "", absl::StatusCode::kInvalidArgument, "model: must be set"},
      {Request("far too long", 1), "", absl::StatusCode::kInvalidArgument,
       "text: the prompt has 12 bytes, the limit is 8"},
      {both, "", absl::StatusCode::kInvalidArgument, "prompt: set either text or token_ids"},
      {Request("x", 65), "", absl::StatusCode::kInvalidArgument, "max_tokens: must be at most 64, got 65"},
      {Request("x", 1), "sampling.top_k: not a number", absl::StatusCode::kInvalidArgument,
       "sampling.top_k: not a number"},
  };
  for (const Case& c : cases) {
    RecordingSink sink;
    GenerationCall call(&frontend);
    const absl::Status s = call.Submit(c.request, grpc_, &sink, c.defect);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    EXPECT_FALSE(sink.done.HasBeenNotified());
  }
  EXPECT_TRUE(gate_.WaitIdle(absl::Seconds(1))) << "a refused call stayed in the gate";
}

TEST_F(GenerationFrontendTest, FieldsAreNamedInTheTransportsSpelling) {
  GenerationFrontend frontend(&models_, {});
  FieldNames http;
  http.top_p = "top_p";
  http.stop = "stop";
  GenerationRequest r = Request("x", 1);
  r.top_p = 1.5f;
  RecordingSink sink;
  GenerationCall call(&frontend);
  EXPECT_EQ(call.Submit(r, http, &sink).message(), "top_p: must be in (0, 1], got 1.5");
  GenerationCall grpc_call(&frontend);
  EXPECT_EQ(grpc_call.Submit(r, grpc_, &sink).message(), "sampling.top_p: must be in (0, 1], got 1.5");
}

TEST_F(GenerationFrontendTest, ADrainingGateTurnsNewCallsAway) {
  GenerationFrontend frontend(&models_, {}, &gate_);
  gate_.StartDraining();
  RecordingSink sink;
  GenerationCall call(&frontend);
  const absl::Status s = call.Submit(Request("x", 1), grpc_, &sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "the server is draining and accepts no new requests");
}

TEST_F(GenerationFrontendTest, ACancelBeforeSubmitCancelsTheRequestOnceAdmitted) {
  GenerationFrontend frontend(&models_, {});
  RecordingSink sink;
  GenerationCall call(&frontend);
  call.Cancel();  // the client went away while the call was being admitted
  ASSERT_TRUE(call.Submit(Request("Hello", 60), grpc_, &sink).ok());
  sink.done.WaitForNotification();
  EXPECT_EQ(sink.Result().status.code(), absl::StatusCode::kCancelled) << sink.Result().status;
  EXPECT_LT(sink.Tokens().size(), 60u);
}

}  // namespace
}  // namespace autouvm::engine
