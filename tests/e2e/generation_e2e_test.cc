// End-to-end: the real autouvmd binary on 127.0.0.1 port 0, driven through the generated gRPC stubs.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/llama_builder.h"
#include "tests/e2e/daemon_process.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"

namespace autouvm::testing {
namespace {

using autouvm::v1::GenerateRequest;
using autouvm::v1::GenerateResponse;
using autouvm::v1::GenerateStreamResponse;
using grpc::health::v1::HealthCheckResponse;

struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  int chunks = 0;
  bool has_final = false;
  GenerateResponse final;
};

GenerateRequest Greedy(const std::string& prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.set_model("tiny-llama");
  r.set_text(prompt);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

// Reads a whole stream; `after_chunk` (optional) runs after each chunk with the count so far.
StreamResult Stream(DaemonProcess& d, const GenerateRequest& req, grpc::ClientContext* ctx,
                    const std::function<void(int)>& after_chunk = nullptr) {
  StreamResult r;
  auto reader = d.generation()->GenerateStream(ctx, req);
  GenerateStreamResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_chunk()) {
      ++r.chunks;
      r.tokens.insert(r.tokens.end(), msg.chunk().token_ids().begin(), msg.chunk().token_ids().end());
      r.text += msg.chunk().text();
      if (after_chunk) after_chunk(r.chunks);
    } else if (msg.has_final()) {
      r.has_final = true;
      r.final = msg.final();
    }
  }
  r.status = reader->Finish();
  return r;
}

StreamResult Stream(DaemonProcess& d, const GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return Stream(d, req, &ctx);
}

// Polls the model's status until `pred` holds (bounded); the daemon exposes no push for this.
bool WaitForStatus(DaemonProcess& d, const std::function<bool(const autouvm::v1::ModelStatus&)>& pred) {
  for (int i = 0; i < 3000; ++i) {
    if (pred(ModelStatusOf(d))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class GenerationE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start()) << daemon_.Log();
    ASSERT_TRUE(daemon_.WaitForHealth(HealthCheckResponse::SERVING)) << daemon_.Log();
  }
  DaemonProcess daemon_;
};

TEST_F(GenerationE2E, StreamsOneMessagePerTokenThenAFinalMessage) {
  StreamResult r = Stream(daemon_, Greedy("Hello", 12));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 12u);
  EXPECT_GE(r.chunks, 12);
  ASSERT_TRUE(r.has_final);
  EXPECT_EQ(r.final.finish_reason(), autouvm::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.final.usage().completion_tokens(), 12u);
  EXPECT_EQ(r.final.usage().prompt_tokens(), 6u);  // bos + 5 bytes
  EXPECT_EQ(r.final.model(), "tiny-llama");
  EXPECT_FALSE(r.final.request_id().empty());
  EXPECT_GT(r.final.timings().time_to_first_token_ms(), 0);
  EXPECT_GT(r.final.timings().per_token_ms(), 0);
  EXPECT_GE(r.final.timings().total_ms(), r.final.timings().time_to_first_token_ms());
}

TEST_F(GenerationE2E, UnaryGivesTheSameTokensAsTheStream) {
  const GenerateRequest req = Greedy("The quick brown fox", 16);
  StreamResult streamed = Stream(daemon_, req);
  grpc::ClientContext ctx;
  GenerateResponse resp;
  ASSERT_TRUE(daemon_.generation()->Generate(&ctx, req, &resp).ok());
  EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()), streamed.tokens);
  EXPECT_EQ(resp.text(), streamed.text);
  EXPECT_EQ(resp.finish_reason(), autouvm::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(resp.usage().completion_tokens(), 16u);
}

TEST_F(GenerationE2E, SeededSamplingIsReproducibleAndSeedsDiffer) {
  GenerateRequest req = Greedy("Once upon a time", 24);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(1234);
  const auto a = Stream(daemon_, req).tokens;
  EXPECT_EQ(a, Stream(daemon_, req).tokens);
  req.mutable_sampling()->set_seed(99);
  EXPECT_NE(a, Stream(daemon_, req).tokens);
}

TEST_F(GenerationE2E, TokenIdPromptAndStopTokens) {
  GenerateRequest req = Greedy("", 40);
  req.clear_text();
  for (int id : {256, 72, 105}) req.mutable_token_ids()->add_ids(id);
  const StreamResult base = Stream(daemon_, req);
  ASSERT_TRUE(base.status.ok());
  ASSERT_EQ(base.tokens.size(), 40u);
  // Stopping on the 5th generated token ends the stream before it, with finish reason STOP.
  req.add_stop_token_ids(base.tokens[4]);
  const StreamResult stopped = Stream(daemon_, req);
  ASSERT_TRUE(stopped.status.ok());
  const size_t first = std::find(base.tokens.begin(), base.tokens.end(), base.tokens[4]) - base.tokens.begin();
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(base.tokens.begin(), base.tokens.begin() + first));
  EXPECT_EQ(stopped.final.finish_reason(), autouvm::v1::FINISH_REASON_STOP);
}

TEST_F(GenerationE2E, UnknownModelIsNotFound) {
  GenerateRequest req = Greedy("hi", 4);
  req.set_model("no-such-model");
  StreamResult r = Stream(daemon_, req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(r.status.error_message().find("no-such-model"), std::string::npos);
  grpc::ClientContext ctx;
  autouvm::v1::GetModelStatusRequest sreq;
  sreq.set_model("no-such-model");
  autouvm::v1::ModelStatus status;
  EXPECT_EQ(daemon_.admin()->GetModelStatus(&ctx, sreq, &status).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GenerationE2E, BadRequestsNameTheField) {
  GenerateRequest req = Greedy("hi", 4);
  req.mutable_sampling()->set_top_p(1.5f);
  StreamResult r = Stream(daemon_, req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message().rfind("sampling.top_p", 0), 0u) << r.status.error_message();
  req = Greedy(std::string(600, 'a'), 4);
  grpc::ClientContext ctx;
  GenerateResponse resp;
  grpc::Status s = daemon_.generation()->Generate(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("prompt", 0), 0u) << s.error_message();
}

TEST_F(GenerationE2E, CancellationMidStreamStopsGeneration) {
  grpc::ClientContext ctx;
  StreamResult r = Stream(daemon_, Greedy("cancel me", 400), &ctx, [&](int chunks) {
    if (chunks == 3) ctx.TryCancel();
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(r.has_final);
  ASSERT_TRUE(WaitForStatus(daemon_, [](const auto& s) { return s.active_requests() == 0; }));
  // The server stopped long before max_tokens: generation ended within a few tokens of the cancel.
  EXPECT_LT(ModelStatusOf(daemon_).tokens_generated_total(), 40u);
}

TEST_F(GenerationE2E, DeadlineIsHonouredBetweenTokens) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  StreamResult r = Stream(daemon_, Greedy("slow", 500), &ctx);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  ASSERT_TRUE(WaitForStatus(daemon_, [](const auto& s) { return s.active_requests() == 0; }));
  EXPECT_LT(ModelStatusOf(daemon_).tokens_generated_total(), 500u);
}

TEST_F(GenerationE2E, ConcurrentStreamsAreBatchedAndMatchTheirSoloRuns) {
  constexpr int kStreams = 8;
  std::vector<GenerateRequest> reqs;
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < kStreams; ++i) {
    reqs.push_back(Greedy("prompt number " + std::to_string(i) + std::string(i, '!'), 32));
    StreamResult r = Stream(daemon_, reqs.back());
    ASSERT_TRUE(r.status.ok());
    solo.push_back(r.tokens);
  }
  const auto before = ModelStatusOf(daemon_);
  std::vector<StreamResult> together(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) threads.emplace_back([&, i] { together[i] = Stream(daemon_, reqs[i]); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i;
    EXPECT_EQ(together[i].tokens, solo[i]) << "stream " << i;
  }
  const auto after = ModelStatusOf(daemon_);
  const double steps = after.decode_steps_total() - before.decode_steps_total();
  const double rows = after.decode_rows_total() - before.decode_rows_total();
  // 8 × 31 decode rows; run one by one that would be 248 steps. Batched, far fewer.
  EXPECT_EQ(rows, kStreams * 31.0);
  EXPECT_LT(steps, rows / 3) << "mean batch " << rows / steps;
}

TEST_F(GenerationE2E, ManyOneTokenRequestsAtOnceAllComplete) {
  // Requests that finish as soon as they are admitted: Note [Finish after admission].
  constexpr int kThreads = 8, kEach = 16;
  std::atomic<int> ok{0};
  std::mutex mu;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_failure.empty()) first_failure = what;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        GenerateRequest req = Greedy("x" + std::to_string(t * kEach + i), 1);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        GenerateResponse resp;
        if (i % 2 == 0) {
          const grpc::Status s = daemon_.generation()->Generate(&ctx, req, &resp);
          if (s.ok() && resp.token_ids_size() == 1) {
            ++ok;
          } else {
            fail("unary: " + s.error_message() + ", " + std::to_string(resp.token_ids_size()) + " tokens");
          }
        } else {
          StreamResult r = Stream(daemon_, req, &ctx);
          if (r.status.ok() && r.tokens.size() == 1 && r.has_final) {
            ++ok;
          } else {
            fail("stream: " + r.status.error_message() + ", " + std::to_string(r.tokens.size()) + " tokens" +
                 (r.has_final ? "" : ", no final message"));
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kEach) << "the first failure: " << first_failure;
}

TEST(SentencePieceE2E, ServesAModelWithASentencePieceTokenizer) {
  DaemonProcess d;
  // A model entry whose tokenizer.model is trained here; the daemon loads it through its plugin.
  TempDir work;
  {
    std::ofstream corpus(work.Sub("corpus.txt"));
    for (int i = 0; i < 50; ++i) corpus << "the daemon streams tokens to every client " << i << "\n";
  }
  ASSERT_EQ(tokenizer::TrainSentencePieceModel(work.Sub("corpus.txt"), work.Sub("sp"), 300), "");
  engine::ModelConfig c = engine::DefaultTinyModelConfig("sp-llama");
  c.tokenizer = "sentencepiece";
  c.vocab_size = 300;
  c.bos_id = 1;
  c.eos_id = 2;
  ASSERT_TRUE(engine::WriteLlamaModel(c, 5, d.repository()).ok());
  std::filesystem::copy_file(work.Sub("sp.model"), d.repository() + "/sp-llama/tokenizer.model");
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();

  GenerateRequest req = Greedy("the daemon streams", 10);
  req.set_model("sp-llama");
  StreamResult r = Stream(d, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << d.Log();
  EXPECT_EQ(r.tokens.size(), 10u);
  // The daemon encoded the prompt as this process's sentencepiece does: bos + pieces, fewer than bytes.
  auto tok = tokenizer::CreateTokenizer(engine::TokenizerSpecOf(c), d.repository() + "/sp-llama");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("the daemon streams");
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), 18u);
  EXPECT_EQ(r.final.usage().prompt_tokens(), 1 + ids->size());
  EXPECT_EQ(r.text, (*tok)->Decode(r.tokens));
  for (int32_t t : r.tokens) EXPECT_LT(t, 300);
}

}  // namespace
}  // namespace autouvm::testing
