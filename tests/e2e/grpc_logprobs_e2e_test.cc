// End-to-end: GenerateRequest.logprobs against the real autouvmd on 127.0.0.1 port 0 with the tiny model.
// None come back unless asked; asked, each generated token carries its log-probability and the asked
// number of most likely alternatives, the same floats bit for bit whether streamed or unary, and the same
// bits the daemon's OpenAI HTTP API returns for the same request; above 20 is refused naming the field.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using autouvm::v1::GenerateRequest;
using autouvm::v1::GenerateResponse;
using autouvm::v1::GenerateStreamResponse;
using autouvm::v1::TokenLogprobs;

constexpr uint32_t kMaxTokens = 8;

// The float's bits: equal bits, equal values (no rounding on the way, no conversion that changed them).
uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Greedy, EOS ignored, on the prompt bos "Hi" as token ids (the HTTP API takes the same ids as they are).
GenerateRequest Request(std::optional<uint32_t> logprobs) {
  GenerateRequest r;
  r.set_model("tiny-llama");
  for (int id : {256, 72, 105}) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(kMaxTokens);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0);
  if (logprobs.has_value()) r.set_logprobs(*logprobs);
  return r;
}

struct Streamed {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  int chunks_whose_logprobs_do_not_match_their_tokens = 0;
  GenerateResponse final;
};

Streamed Stream(DaemonProcess& d, const GenerateRequest& request) {
  Streamed s;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = d.generation()->GenerateStream(&ctx, request);
  GenerateStreamResponse msg;
  while (reader->Read(&msg)) {
    if (msg.has_final()) s.final = msg.final();
    if (!msg.has_chunk()) continue;
    const autouvm::v1::TokenChunk& c = msg.chunk();
    s.tokens.insert(s.tokens.end(), c.token_ids().begin(), c.token_ids().end());
    s.logprobs.insert(s.logprobs.end(), c.logprobs().begin(), c.logprobs().end());
    if (!c.logprobs().empty() && c.logprobs_size() != c.token_ids_size()) {
      ++s.chunks_whose_logprobs_do_not_match_their_tokens;
    }
  }
  s.status = reader->Finish();
  return s;
}

class GrpcLogprobsE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new DaemonProcess();
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    ASSERT_TRUE(daemon_->WaitForHealth(grpc::health::v1::HealthCheckResponse::SERVING)) << daemon_->Log();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }

  static GenerateResponse Unary(const GenerateRequest& request) {
    GenerateResponse response;
    const grpc::Status s = CallGenerate(*daemon_, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << daemon_->Log();
    EXPECT_EQ(response.token_ids_size(), static_cast<int>(kMaxTokens));
    return response;
  }

  static DaemonProcess* daemon_;
};

DaemonProcess* GrpcLogprobsE2E::daemon_ = nullptr;

TEST_F(GrpcLogprobsE2E, UnsetGivesNoneStreamedOrUnary) {
  EXPECT_EQ(Unary(Request(std::nullopt)).logprobs_size(), 0);
  const Streamed s = Stream(*daemon_, Request(std::nullopt));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.tokens.size(), kMaxTokens);
  EXPECT_TRUE(s.logprobs.empty());
}

TEST_F(GrpcLogprobsE2E, EachTokenComesWithItsLogprobAndTheMostLikelyAlternativesFirst) {
  const GenerateResponse r = Unary(Request(3));
  ASSERT_EQ(r.logprobs_size(), r.token_ids_size());
  for (int i = 0; i < r.logprobs_size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const TokenLogprobs& t = r.logprobs(i);
    EXPECT_EQ(t.token_id(), r.token_ids(i));
    ASSERT_EQ(t.top_size(), 3);
    // Greedy: the sampled token is the most likely one, with the same logprob to the bit.
    EXPECT_EQ(t.top(0).token_id(), t.token_id());
    EXPECT_EQ(Bits(t.logprob()), Bits(t.top(0).logprob()));
    double mass = 0;
    for (int j = 0; j < 3; ++j) {
      EXPECT_TRUE(std::isfinite(t.top(j).logprob()));
      EXPECT_LE(t.top(j).logprob(), 0.0f);
      if (j > 0) EXPECT_GE(t.top(j - 1).logprob(), t.top(j).logprob()) << "not most likely first";
      if (j > 0) EXPECT_NE(t.top(j - 1).token_id(), t.top(j).token_id());
      mass += std::exp(static_cast<double>(t.top(j).logprob()));
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
  // logprobs: 0 gives the token's logprob alone: the same bits, no alternatives.
  const GenerateResponse none = Unary(Request(0));
  ASSERT_EQ(none.logprobs_size(), r.logprobs_size());
  for (int i = 0; i < none.logprobs_size(); ++i) {
    EXPECT_EQ(none.logprobs(i).top_size(), 0);
    EXPECT_EQ(Bits(none.logprobs(i).logprob()), Bits(r.logprobs(i).logprob())) << "token " << i;
  }
  // 20, the most: 20 alternatives.
  const GenerateResponse most = Unary(Request(20));
  ASSERT_EQ(most.logprobs_size(), r.logprobs_size());
  EXPECT_EQ(most.logprobs(0).top_size(), 20);
}

TEST_F(GrpcLogprobsE2E, StreamedAreTheUnaryBitForBit) {
  const GenerateResponse unary = Unary(Request(3));
  const Streamed s = Stream(*daemon_, Request(3));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.chunks_whose_logprobs_do_not_match_their_tokens, 0);
  EXPECT_EQ(s.tokens, std::vector<int32_t>(unary.token_ids().begin(), unary.token_ids().end()));
  ASSERT_EQ(s.logprobs.size(), static_cast<size_t>(unary.logprobs_size()));
  for (size_t i = 0; i < s.logprobs.size(); ++i) {
    // Serialized floats are their bits: equal bytes, equal ids and floats.
    EXPECT_EQ(s.logprobs[i].SerializeAsString(), unary.logprobs(static_cast<int>(i)).SerializeAsString())
        << "token " << i << ": " << s.logprobs[i].ShortDebugString() << " streamed, "
        << unary.logprobs(static_cast<int>(i)).ShortDebugString() << " unary";
  }
  EXPECT_EQ(s.final.logprobs_size(), 0) << "the final message repeats what was streamed";
}

// The HTTP API's JSON carries each float as a double with enough digits to come back to the same float,
// so the two APIs must agree to the bit.
TEST_F(GrpcLogprobsE2E, TheValuesAreTheOpenAiApisBitForBit) {
  const GenerateResponse grpc = Unary(Request(3));
  httplib::Client http("127.0.0.1", daemon_->http_port());
  http.set_read_timeout(60);
  const auto res = http.Post("/v1/completions",
                             R"({"model": "tiny-llama", "prompt": [256, 72, 105], "max_tokens": 8,
                                 "temperature": 0, "ignore_eos": true, "logprobs": 3})",
                             "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const nlohmann::json choice = nlohmann::json::parse(res->body)["choices"][0];
  const nlohmann::json& lp = choice["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), static_cast<size_t>(grpc.logprobs_size()));
  for (int i = 0; i < grpc.logprobs_size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const TokenLogprobs& t = grpc.logprobs(i);
    EXPECT_EQ(Bits(static_cast<float>(lp["token_logprobs"][i].get<double>())), Bits(t.logprob()));
    // top_logprobs is keyed by token text: tokens that show as the same text (bytes of a character, as
    // U+FFFD) keep one entry. Every value is one of the gRPC top's; all three when the texts differ.
    std::vector<uint32_t> http_top, grpc_top;
    for (const auto& [text, v] : lp["top_logprobs"][i].items())
      http_top.push_back(Bits(static_cast<float>(v.get<double>())));
    for (const auto& e : t.top()) grpc_top.push_back(Bits(e.logprob()));
    for (uint32_t b : http_top) EXPECT_NE(std::find(grpc_top.begin(), grpc_top.end(), b), grpc_top.end());
    if (http_top.size() == grpc_top.size()) {
      std::sort(http_top.begin(), http_top.end());
      std::sort(grpc_top.begin(), grpc_top.end());
      EXPECT_EQ(http_top, grpc_top);
    }
  }
}

TEST_F(GrpcLogprobsE2E, AboveTwentyIsInvalidArgumentNamingTheFieldAndTheLimit) {
  for (uint32_t n : {21u, 4294967295u}) {
    const std::string want = "logprobs: must be in [0, 20], got " + std::to_string(n);
    const grpc::Status unary = CallGenerate(*daemon_, Request(n));
    EXPECT_EQ(unary.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(unary.error_message(), want);
    const Streamed s = Stream(*daemon_, Request(n));
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.status.error_message(), want);
    EXPECT_TRUE(s.tokens.empty());
  }
}

}  // namespace
}  // namespace autouvm::testing
