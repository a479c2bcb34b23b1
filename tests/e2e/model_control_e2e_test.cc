// End-to-end: models loaded and unloaded through the real daemon's Admin API, and device budgets that
// must fit the GPU together (Note [Budgets that hold together], server/device_budgets.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

autouvm::v1::ModelStatus Status(DaemonProcess& d, const std::string& model, grpc::Status* status = nullptr) {
  autouvm::v1::GetModelStatusRequest req;
  req.set_model(model);
  autouvm::v1::ModelStatus resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status s = d.admin()->GetModelStatus(&ctx, req, &resp);
  if (status != nullptr) *status = s;
  return resp;
}

grpc::Status Load(DaemonProcess& d, const std::string& model, autouvm::v1::LoadModelResponse* resp = nullptr) {
  autouvm::v1::LoadModelRequest req;
  req.set_model(model);
  autouvm::v1::LoadModelResponse ignored;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return d.admin()->LoadModel(&ctx, req, resp != nullptr ? resp : &ignored);
}

grpc::Status Unload(DaemonProcess& d, const std::string& model) {
  autouvm::v1::UnloadModelRequest req;
  req.set_model(model);
  autouvm::v1::UnloadModelResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return d.admin()->UnloadModel(&ctx, req, &resp);
}

// A model slow enough on the CPU (tens of ms a token) that a request runs while the test acts.
ModelEntry Slow(const std::string& name) {
  return {.name = name, .dim = 512, .layers = 8, .heads = 8, .kv_heads = 4, .ffn_dim = 1536, .max_seq = 1024};
}

// Two models whose budgets (0.6 of the GPU each) do not fit together: whichever loads second is refused
// with the budgets named, and the other serves.
TEST(ModelControlE2E, ABudgetThatDoesNotFitIsRefusedNamingTheBudgetsAndTheOtherModelServes) {
  DaemonProcess d(
      {.config_yaml = "models: {a: {device_budget: 0.6}, b: {device_budget: 0.6}}\n", .generate_default_model = false});
  ASSERT_EQ(WriteModelEntry(d.repository(), {.name = "a"}), "");
  ASSERT_EQ(WriteModelEntry(d.repository(), {.name = "b"}), "");
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  const autouvm::v1::ModelStatus a = Status(d, "a"), b = Status(d, "b");
  const bool a_ready = a.state() == autouvm::v1::MODEL_STATE_READY;
  const autouvm::v1::ModelStatus& ready = a_ready ? a : b;
  const autouvm::v1::ModelStatus& refused = a_ready ? b : a;
  ASSERT_EQ(ready.state(), autouvm::v1::MODEL_STATE_READY) << ready.DebugString();
  ASSERT_EQ(refused.state(), autouvm::v1::MODEL_STATE_FAILED) << refused.DebugString();
  const std::string& error = refused.error();
  EXPECT_NE(error.find("device_budget"), std::string::npos) << error;
  EXPECT_NE(error.find("does not fit"), std::string::npos) << error;
  EXPECT_NE(error.find(ready.name() + " "), std::string::npos) << error;  // the budget it does not fit beside
  EXPECT_NE(error.find("runtime.device_reserve"), std::string::npos) << error;
  EXPECT_NE(error.find("models." + refused.name() + ".device_budget"), std::string::npos) << error;
  EXPECT_TRUE(CallGenerate(d, GreedyRequest(ready.name(), "hi", 4)).ok());
  EXPECT_EQ(CallGenerate(d, GreedyRequest(refused.name(), "hi", 4)).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Unloading the one that serves frees its budget: the other loads now.
  ASSERT_TRUE(Unload(d, ready.name()).ok());
  const grpc::Status loaded = Load(d, refused.name());
  EXPECT_TRUE(loaded.ok()) << loaded.error_message();
  EXPECT_TRUE(CallGenerate(d, GreedyRequest(refused.name(), "hi", 4)).ok());
}

// Unload drains: the request running finishes whole, a new one is refused while it does, and the model
// is gone after; the repository is read again on load (a model added after the start too); a model
// without a budget of its own asks for the share the models got at the start.
TEST(ModelControlE2E, UnloadLetsItsRequestsFinishAndLoadReadsTheRepositoryAgain) {
  DaemonProcess d({.config_yaml = "", .generate_default_model = true});
  ASSERT_EQ(WriteModelEntry(d.repository(), Slow("slow")), "");
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  const int64_t share = Status(d, "slow").device_budget_bytes();
  EXPECT_GT(share, 0);
  EXPECT_EQ(Status(d, "tiny-llama").device_budget_bytes(), share);  // the two split what is left

  // A stream of 60 tokens on the slow model, and the unload while it runs.
  grpc::ClientContext stream_ctx;
  auto stream = d.generation()->GenerateStream(&stream_ctx, GreedyRequest("slow", "hello", 60));
  autouvm::v1::GenerateStreamResponse msg;
  ASSERT_TRUE(stream->Read(&msg));
  grpc::Status unloaded;
  std::thread unload([&] { unloaded = Unload(d, "slow"); });
  for (int i = 0; i < 200 && Status(d, "slow").state() != autouvm::v1::MODEL_STATE_UNLOADING; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Status(d, "slow").state(), autouvm::v1::MODEL_STATE_UNLOADING);
  EXPECT_EQ(CallGenerate(d, GreedyRequest("slow", "x", 2)).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(CallGenerate(d, GreedyRequest("tiny-llama", "x", 2)).ok());  // the other serves on
  int tokens = 0;
  uint32_t completion = 0;
  do {
    if (msg.has_chunk()) tokens += msg.chunk().token_ids_size();
    if (msg.has_final()) completion = msg.final().usage().completion_tokens();
  } while (stream->Read(&msg));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(tokens, 60);
  EXPECT_EQ(completion, 60u);
  unload.join();
  EXPECT_TRUE(unloaded.ok()) << unloaded.error_message();
  grpc::Status gone;
  Status(d, "slow", &gone);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(CallGenerate(d, GreedyRequest("slow", "x", 2)).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Unload(d, "slow").error_code(), grpc::StatusCode::NOT_FOUND);

  // A model written after the start: its share is still the slow model's, free since the unload.
  ASSERT_EQ(WriteModelEntry(d.repository(), {.name = "late"}), "");
  autouvm::v1::LoadModelResponse late;
  const grpc::Status loaded = Load(d, "late", &late);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  EXPECT_EQ(late.model().state(), autouvm::v1::MODEL_STATE_READY);
  EXPECT_EQ(late.model().device_budget_bytes(), share);
  EXPECT_TRUE(CallGenerate(d, GreedyRequest("late", "x", 2)).ok());
  // Nothing is left for the slow model's share now.
  const grpc::Status full = Load(d, "slow");
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  EXPECT_NE(full.error_message().find("late "), std::string::npos) << full.error_message();
  EXPECT_EQ(Status(d, "slow").state(), autouvm::v1::MODEL_STATE_FAILED);
  EXPECT_EQ(Load(d, "late").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Load(d, "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Load(d, "../models").error_code(), grpc::StatusCode::NOT_FOUND);
  // The failed one loads once there is room.
  ASSERT_TRUE(Unload(d, "late").ok());
  EXPECT_TRUE(Load(d, "slow").ok());
  EXPECT_TRUE(CallGenerate(d, GreedyRequest("slow", "x", 2)).ok());
}

// Issue 28's CPU check of step-level interleaving: two models, each following its plans on the mirror
// within its budget. A request to one is served while a long stream of the other runs — it does not
// wait for that stream to end — with the tokens it gets alone, and neither model leaves its budget. (The
// slow model's stream is kept to 40 tokens: its KV rows then stay within the room its decode plan left.
// Past it the executor reads pinned weights in place to make room (Note [KV pools follow the rows in
// use]), but only whole 2 MiB blocks, and this toy model's matrices of 0.5-3 MiB are none: at 120 tokens
// its executor held 0.8 MB over the budget.)
TEST(ModelControlE2E, TwoModelsUnderTheirBudgetsServeAtOnceNeitherWaitingForTheOthersRequest) {
  constexpr int64_t kSlowBudget = 48 << 20;  // of its ~100 MB of weights
  constexpr int64_t kTinyBudget = 8 << 20;   // of its ~11 MiB
  DaemonProcess d(
      {.config_yaml = "runtime: {executor: true}\nmodels: {slow: {device_budget: " + std::to_string(kSlowBudget) +
                      "}, tiny-llama: {device_budget: " + std::to_string(kTinyBudget) + "}}\n",
       .generate_default_model = true});
  ASSERT_EQ(WriteModelEntry(d.repository(), Slow("slow")), "");
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  autouvm::v1::GenerateResponse alone;
  ASSERT_TRUE(CallGenerate(d, GreedyRequest("tiny-llama", "hello", 16), &alone).ok());

  grpc::ClientContext stream_ctx;
  auto stream = d.generation()->GenerateStream(&stream_ctx, GreedyRequest("slow", "hello", 40));
  autouvm::v1::GenerateStreamResponse msg;
  ASSERT_TRUE(stream->Read(&msg));
  autouvm::v1::GenerateResponse beside;
  ASSERT_TRUE(CallGenerate(d, GreedyRequest("tiny-llama", "hello", 16), &beside).ok());
  EXPECT_EQ(beside.text(), alone.text());
  // The slow model's stream is still running when the other model's request has ended.
  EXPECT_EQ(Status(d, "slow").active_requests(), 1u) << "the slow model's 40 tokens were done before the other's 16";
  int tokens = 0;
  do {
    if (msg.has_chunk()) tokens += msg.chunk().token_ids_size();
  } while (stream->Read(&msg));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(tokens, 40);

  for (const auto& [model, budget] :
       {std::pair<std::string, int64_t>{"slow", kSlowBudget}, {"tiny-llama", kTinyBudget}}) {
    const autouvm::v1::ModelStatus st = Status(d, model);
    ASSERT_TRUE(st.has_execution()) << st.DebugString();
    EXPECT_GT(st.execution().followed_iterations(), 0u) << model << ": " << st.execution().DebugString();
    EXPECT_EQ(st.execution().abandoned_iterations(), 0u) << model << ": " << st.execution().last_error();
    EXPECT_LE(st.execution().peak_resident_bytes(), budget) << model << ": " << st.execution().DebugString();
    EXPECT_GT(st.execution().resident_bytes(), 0) << model;
    ASSERT_GT(st.execution().plan_switches(), 0u) << model;
    EXPECT_GT(st.execution().plan_switch_seconds(), 0) << model << ": its switches' host time";
  }
}

// Note [Passes by shares] (engine/step_turns.cc): two models of the same size, shares 3 and 1, each
// streaming a long request at once: while both have work, the first gets about three passes to the
// second's one, so when its 90 tokens are done the other has about 30 (at equal shares, about 90).
TEST(ModelControlE2E, ModelsTakePassesByTheirShares) {
  DaemonProcess d({.config_yaml = "models: {a: {share: 3}, b: {share: 1}}\n", .generate_default_model = false});
  ASSERT_EQ(WriteModelEntry(d.repository(), Slow("a")), "");
  ASSERT_EQ(WriteModelEntry(d.repository(), Slow("b")), "");
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  // Each model's first passes (prefill, a decode shape recorded if plan_at_load missed it) out of the way.
  for (const std::string model : {"a", "b"}) {
    autouvm::v1::GenerateResponse warm;
    ASSERT_TRUE(CallGenerate(d, GreedyRequest(model, "hello", 4), &warm).ok()) << model;
  }
  constexpr int kTokens = 90;
  std::atomic<int> a_tokens{0}, b_tokens{0}, b_when_a_done{-1};
  auto stream = [&](const std::string& model, std::atomic<int>* count, bool first) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(3));
    auto reader = d.generation()->GenerateStream(&ctx, GreedyRequest(model, "hello", kTokens));
    autouvm::v1::GenerateStreamResponse msg;
    while (reader->Read(&msg)) {
      if (msg.has_chunk()) *count += msg.chunk().token_ids_size();
    }
    if (first) b_when_a_done = b_tokens.load();
    EXPECT_TRUE(reader->Finish().ok()) << model;
  };
  std::thread a([&] { stream("a", &a_tokens, true); });
  std::thread b([&] { stream("b", &b_tokens, false); });
  a.join();
  b.join();
  EXPECT_EQ(a_tokens.load(), kTokens);
  EXPECT_EQ(b_tokens.load(), kTokens);
  // Turns are charged by each pass's time, which a loaded machine stretches unevenly (6 under CI's load
  // without the warm-up above): the bound that tells shares from none is the upper one.
  EXPECT_GE(b_when_a_done.load(), 3) << "b starved";
  EXPECT_LE(b_when_a_done.load(), 50) << "b kept pace with a: the shares did not hold";
  // The smaller share waited for the other's passes, and says so (autouvm_model_turn_wait_seconds_total).
  EXPECT_GT(Status(d, "b").turn_wait_seconds(), 0);
}

}  // namespace
}  // namespace autouvm::testing
