// End-to-end: a shape's identity on the real daemon. Prompts of one prefill bucket share its plan
// whatever their length (Note [Kernels that depend on size], runtime/observer.cc); a model whose ops
// do change within a bucket is profiled again once, then served by its last plan and never profiled
// again, every mismatch counted (Note [A shape whose ops move], profiler/profile_jobs.cc).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/wobbly_model.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

// One prefill of `len` tokens (BOS then 'A's) and a single generated token.
grpc::Status Prefill(DaemonProcess& d, const std::string& model, int len) {
  autouvm::v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_token_ids()->add_ids(256);
  for (int i = 1; i < len; ++i) r.mutable_token_ids()->add_ids(65);
  r.set_max_tokens(1);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0);
  return CallGenerate(d, r);
}

template <typename Req, typename Resp, typename Method>
Resp Admin(DaemonProcess& d, Method method, const Req& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  Resp resp;
  grpc::Status s = (d.admin()->*method)(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

autouvm::v1::ProfileSummary PrefillProfile(DaemonProcess& d, const std::string& model, int len) {
  autouvm::v1::GetProfileRequest req;
  req.set_model(model);
  req.mutable_shape()->set_phase(autouvm::v1::PHASE_PREFILL);
  req.mutable_shape()->set_batch(1);
  req.mutable_shape()->set_prompt_len(len);
  return Admin<autouvm::v1::GetProfileRequest, autouvm::v1::GetProfileResponse>(
             d, &autouvm::v1::Admin::Stub::GetProfile, req)
      .summary();
}

autouvm::v1::ModelStatus Model(DaemonProcess& d, const std::string& model) {
  autouvm::v1::GetModelStatusRequest req;
  req.set_model(model);
  return Admin<autouvm::v1::GetModelStatusRequest, autouvm::v1::ModelStatus>(
      d, &autouvm::v1::Admin::Stub::GetModelStatus, req);
}

autouvm::v1::ServerStatus Server(DaemonProcess& d) {
  return Admin<autouvm::v1::GetServerStatusRequest, autouvm::v1::ServerStatus>(
      d, &autouvm::v1::Admin::Stub::GetServerStatus, autouvm::v1::GetServerStatusRequest());
}

int Recordings(const autouvm::v1::ProfileSummary& s) {
  int n = 0;
  for (const auto& h : s.history()) n += h.state() == autouvm::v1::PROFILE_STATE_RECORDING;
  return n;
}

bool ReadyFor(DaemonProcess& d, const std::string& model, int len) {
  return PrefillProfile(d, model, len).state() == autouvm::v1::PROFILE_STATE_READY;
}

// Issue 24's repro: prompts of 40 and 64 tokens (one bucket, 33..64) took turns re-profiling it, five
// abandoned iterations in five rounds, the mismatch counters at 0 meanwhile.
TEST(ShapeIdentityE2E, PromptsOfOneBucketFollowItsPlanWhateverTheirLength) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  ASSERT_TRUE(Prefill(d, "tiny-llama", 40).ok());
  ASSERT_TRUE(Eventually([&] { return ReadyFor(d, "tiny-llama", 40); })) << d.Log();
  const uint64_t followed_before = Model(d, "tiny-llama").execution().followed_iterations();
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(Prefill(d, "tiny-llama", 64).ok());
    ASSERT_TRUE(Prefill(d, "tiny-llama", 40).ok());
  }
  const autouvm::v1::ModelStatus m = Model(d, "tiny-llama");
  EXPECT_EQ(m.execution().abandoned_iterations(), 0u) << m.execution().last_error();
  EXPECT_EQ(m.execution().followed_iterations() - followed_before, 10u);
  const autouvm::v1::ServerStatus s = Server(d);
  EXPECT_EQ(s.identity_mismatches_total(), 0u);
  EXPECT_EQ(s.mismatched_ops_total(), 0u);
  const autouvm::v1::ProfileSummary p = PrefillProfile(d, "tiny-llama", 64);
  EXPECT_EQ(p.state(), autouvm::v1::PROFILE_STATE_READY) << p.DebugString();
  EXPECT_EQ(Recordings(p), 1) << p.DebugString();
}

// A model whose prefill runs one more op at odd lengths: 12 and 13 tokens share the bucket of 16. With
// the model within its budget (the default), and under a budget that stages its weights on the mirror,
// where an iteration that stops part way is not trusted and runs again, following nothing: each even
// prompt is one abandoned iteration, not two.
class ShapeIdentityBudgetE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(ShapeIdentityBudgetE2E, AShapeWhoseOpsMoveIsProfiledAgainOnceThenServedByItsLastPlan) {
  DaemonProcess d({.config_yaml = GetParam(), .generate_default_model = false});
  ASSERT_TRUE(WriteWobblyModel("wobbly", d.repository()).ok());
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  auto settled = [&] {
    const auto st = PrefillProfile(d, "wobbly", 12).state();
    return st == autouvm::v1::PROFILE_STATE_READY || st == autouvm::v1::PROFILE_STATE_FAILED;
  };
  ASSERT_TRUE(Prefill(d, "wobbly", 12).ok());  // recorded: the even profile
  ASSERT_TRUE(Eventually(settled)) << d.Log();
  ASSERT_TRUE(Prefill(d, "wobbly", 13).ok());  // a mismatch: stale, the next one records again
  ASSERT_TRUE(Prefill(d, "wobbly", 13).ok());  // recorded: the odd profile
  ASSERT_TRUE(Eventually(settled)) << d.Log();
  EXPECT_EQ(Server(d).identity_mismatches_total(), 1u);
  ASSERT_TRUE(Prefill(d, "wobbly", 12).ok());  // the second mismatch: unstable
  const autouvm::v1::ProfileSummary unstable = PrefillProfile(d, "wobbly", 12);
  EXPECT_EQ(unstable.state(), autouvm::v1::PROFILE_STATE_READY) << unstable.DebugString();
  EXPECT_EQ(unstable.reason().rfind("unstable: ", 0), 0u) << unstable.reason();
  const uint64_t followed_before = Model(d, "wobbly").execution().followed_iterations();
  const uint64_t abandoned_before = Model(d, "wobbly").execution().abandoned_iterations();

  // From here nothing is recorded again: odd prompts follow the last plan, even ones stop at the op
  // that differs, and each of those is counted, logged only once.
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(Prefill(d, "wobbly", 13).ok());
    ASSERT_TRUE(Prefill(d, "wobbly", 12).ok());
  }
  const autouvm::v1::ProfileSummary p = PrefillProfile(d, "wobbly", 13);
  EXPECT_EQ(Recordings(p), 2) << p.DebugString();
  EXPECT_EQ(p.state(), autouvm::v1::PROFILE_STATE_READY);
  const autouvm::v1::ServerStatus s = Server(d);
  EXPECT_EQ(s.identity_mismatches_total(), 2u + 5u);
  EXPECT_GE(s.mismatched_ops_total(), s.identity_mismatches_total());
  const autouvm::v1::ModelStatus m = Model(d, "wobbly");
  EXPECT_EQ(m.execution().followed_iterations() - followed_before, 5u);
  EXPECT_EQ(m.execution().abandoned_iterations() - abandoned_before, 5u);
  const std::string log = d.Log();
  const std::string once = "this shape runs other ops from one iteration to the next";
  ASSERT_NE(log.find(once), std::string::npos) << log;
  EXPECT_EQ(log.find(once, log.find(once) + 1), std::string::npos) << log;

  // The gauge says so too.
  const std::string address = Server(d).metrics_address();
  httplib::Client http("127.0.0.1", std::stoi(address.substr(address.rfind(':') + 1)));
  auto scrape = http.Get("/metrics");
  ASSERT_TRUE(scrape);
  EXPECT_NE(scrape->body.find("autouvm_profiles_unstable{model=\"wobbly\"} 1"), std::string::npos) << scrape->body;
}

INSTANTIATE_TEST_SUITE_P(Budgets, ShapeIdentityBudgetE2E,
                         ::testing::Values("", "models: {wobbly: {device_budget: 8388608}}\n"),
                         [](const auto& info) { return info.param.empty() ? "Resident" : "Staged"; });

}  // namespace
}  // namespace autouvm::testing
