// End-to-end: the executor inside the real daemon on the CPU backend — once a shape's profile is ready,
// its iterations follow the plan through the simulated mirror on runtime.gpu (GetModelStatus reports
// what it did), the tokens are those of the same request without the executor, and neither `stock` nor
// runtime.executor: false follows anything.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tests/e2e/daemon_process.h"
#include "tests/testing/eventually.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

constexpr char kModel[] = "tiny-llama";
// 143 bytes and BOS: a prefill whose products are too dense to read the weights in place (over 64
// tokens in fp32), so that under the budget its plan streams them (a decode step reads what is not pinned
// in place, and the KV pools it reaches are small: Note [KV pools by their live rows]).
constexpr char kPrompt[] =
    "hello world, this prompt is long enough that its prefill streams the weights it cannot pin through "
    "the window and evicts them after their layer";
constexpr int64_t kBudget = 8 << 20;  // of the tiny model's ~11 MiB of weights

// A greedy completion of kPrompt; its text, or "" with the failure recorded.
std::string Complete(DaemonProcess& d, uint32_t max_tokens) {
  autouvm::v1::GenerateResponse resp;
  grpc::Status s = CallGenerate(d, GreedyRequest(kModel, kPrompt, max_tokens), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.usage().completion_tokens(), max_tokens);
  return resp.text();
}

autouvm::v1::ModelStatus Status(DaemonProcess& d) {
  autouvm::v1::GetModelStatusRequest req;
  req.set_model(kModel);
  autouvm::v1::ModelStatus resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status s = d.admin()->GetModelStatus(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

bool Ready(DaemonProcess& d, autouvm::v1::Phase phase) {
  autouvm::v1::GetProfileRequest req;
  req.set_model(kModel);
  req.mutable_shape()->set_phase(phase);
  req.mutable_shape()->set_batch(1);
  if (phase == autouvm::v1::PHASE_PREFILL) req.mutable_shape()->set_prompt_len(sizeof(kPrompt));  // BOS too
  autouvm::v1::GetProfileResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return d.admin()->GetProfile(&ctx, req, &resp).ok() && resp.summary().state() == autouvm::v1::PROFILE_STATE_READY;
}

// Starts a daemon with `config`, profiles kPrompt's prefill and decode shapes with one request, waits for
// both profiles, and returns the text of that first (unfollowed) request.
std::string ProfileBoth(DaemonProcess& d, uint32_t max_tokens) {
  EXPECT_TRUE(d.Start()) << d.Log();
  EXPECT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  std::string text = Complete(d, max_tokens);
  EXPECT_TRUE(Eventually([&] { return Ready(d, autouvm::v1::PHASE_PREFILL) && Ready(d, autouvm::v1::PHASE_DECODE); }))
      << d.Log();
  return text;
}

std::string Config(const std::string& policy, bool executor) {
  return "runtime: {executor: " + std::string(executor ? "true" : "false") +
         "}\nmodels: {tiny-llama: {policy: " + policy + ", device_budget: " + std::to_string(kBudget) + "}}\n";
}

TEST(ExecutorE2E, ReadyShapesFollowTheirPlansOnTheMirrorAndGenerateTheSameTokens) {
  constexpr uint32_t kTokens = 8;
  DaemonProcess d({.config_yaml = Config("autouvm", true)});
  const std::string first = ProfileBoth(d, kTokens);
  const autouvm::v1::ModelStatus before = Status(d);
  ASSERT_TRUE(before.has_execution()) << before.DebugString();

  // Both shapes are ready: the prefill and every decode step of this request follow their plans.
  EXPECT_EQ(Complete(d, kTokens), first);
  const autouvm::v1::ModelStatus after = Status(d);
  const autouvm::v1::ExecutionStatus& e = after.execution();
  EXPECT_EQ(e.backend(), "sim");
  EXPECT_EQ(e.abandoned_iterations(), 0u) << e.last_error() << "\n" << d.Log();
  EXPECT_GE(e.followed_iterations() - before.execution().followed_iterations(), kTokens) << e.DebugString();
  // The prefill's plan and the decode step's take the placement in turn.
  EXPECT_GE(e.plan_switches() - before.execution().plan_switches(), 2u) << e.DebugString();
  EXPECT_NE(e.following().find("/decode/"), std::string::npos) << e.following();
  // Under a budget below the model's bytes the plans stream: the executor fetches and evicts, the
  // simulated link carries bytes, and what it holds stays within the budget.
  EXPECT_GT(e.prefetched_bytes(), before.execution().prefetched_bytes()) << e.DebugString();
  EXPECT_GT(e.evicted_bytes(), 0) << e.DebugString();
  EXPECT_GT(e.h2d_bytes(), 0) << e.DebugString();
  EXPECT_GT(e.resident_bytes(), 0) << e.DebugString();
  EXPECT_LE(e.resident_bytes(), kBudget) << e.DebugString();
  EXPECT_TRUE(e.last_error().empty()) << e.last_error();
  // The runtime monitor timed the second decode step after the prefill's switch.
  EXPECT_GE(e.sampled_iterations(), 1u) << e.DebugString();
}

// Note [KV pools follow the rows in use] (runtime/executor_kv_rows.cc): the runner tells the followed plan how
// many pool rows are in use before each step, and the mirror places them. A request of 8 tokens ends
// with 152 positions (10 blocks of 16, and the null block); one of 200 tokens grows to 344 (22 blocks),
// and the executor's account grows by the 12 blocks' rows of every layer's keys and values, which stay
// placed when it ends.
TEST(ExecutorE2E, TheKvRowsALongerSequenceGrowsIntoArePlacedByThePlanItFollows) {
  // tiny-llama: 4 layers, keys and values, 2 key/value heads of 32 dims in fp32.
  constexpr int64_t kRowBytes = 4 * 2 * 2 * 32 * 4;
  DaemonProcess d({.config_yaml = Config("autouvm", true)});
  ProfileBoth(d, 8);
  Complete(d, 8);  // every step followed, its rows within the plan's
  const autouvm::v1::ExecutionStatus shorter = Status(d).execution();
  Complete(d, 200);
  const autouvm::v1::ExecutionStatus longer = Status(d).execution();
  EXPECT_NE(longer.following().find("/decode/"), std::string::npos) << longer.following();
  EXPECT_EQ(longer.abandoned_iterations(), 0u) << longer.last_error();
  EXPECT_EQ(longer.resident_bytes() - shorter.resident_bytes(), 12 * 16 * kRowBytes) << shorter.DebugString() << "\n"
                                                                                     << longer.DebugString();
  EXPECT_LE(longer.peak_resident_bytes(), kBudget) << longer.DebugString();
}

// Note [The budget from load] (runtime/unplanned_placement.cc): before any plan exists (plan_at_load off)
// the model, larger than its budget, has its weights read in place — none is on the device — and the
// request that records its first shape, which follows no plan, leaves it so; the plans that follow keep
// it within its budget. The first request is its prefill alone (one token), so that no step of it can
// follow a plan whatever the machine's speed: its decode shape's profile, made in the background, could
// be ready before a longer request's last steps.
TEST(ExecutorE2E, AModelIsWithinItsBudgetFromLoadBeforeAnyPlan) {
  DaemonProcess d({.config_yaml = "runtime: {executor: true}\nmodels: {tiny-llama: {policy: autouvm, device_budget: " +
                                  std::to_string(kBudget) + ", plan_at_load: false}}\n"});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  const autouvm::v1::ExecutionStatus loaded = Status(d).execution();
  EXPECT_EQ(loaded.plan_switches(), 0u) << loaded.DebugString();
  EXPECT_LE(loaded.peak_resident_bytes(), kBudget) << loaded.DebugString();
  EXPECT_GT(loaded.in_place_bytes(), kBudget) << loaded.DebugString();  // the ~11 MiB of weights

  const std::string first = Complete(d, 1);  // its prefill recorded: no plan yet
  const autouvm::v1::ExecutionStatus recorded = Status(d).execution();
  EXPECT_EQ(recorded.plan_switches(), 0u) << recorded.DebugString();
  EXPECT_GT(recorded.in_place_bytes(), kBudget) << recorded.DebugString();
  EXPECT_LE(recorded.peak_resident_bytes(), kBudget) << recorded.DebugString();
  ASSERT_TRUE(Eventually([&] { return Ready(d, autouvm::v1::PHASE_PREFILL); })) << d.Log();
  const std::string longer = Complete(d, 8);  // its prefill follows the plan; its decode steps are recorded
  EXPECT_EQ(longer.substr(0, first.size()), first);
  const autouvm::v1::ExecutionStatus prefilled = Status(d).execution();
  EXPECT_GT(prefilled.followed_iterations(), 0u) << prefilled.DebugString();
  EXPECT_LE(prefilled.peak_resident_bytes(), kBudget) << prefilled.DebugString();
  ASSERT_TRUE(Eventually([&] { return Ready(d, autouvm::v1::PHASE_DECODE); })) << d.Log();
  EXPECT_EQ(Complete(d, 8), longer);
  const autouvm::v1::ExecutionStatus followed = Status(d).execution();
  EXPECT_GE(followed.followed_iterations(), prefilled.followed_iterations() + 8) << followed.DebugString();
  EXPECT_GT(followed.resident_bytes(), kBudget / 2) << followed.DebugString();  // the plan pins
  EXPECT_LE(followed.peak_resident_bytes(), kBudget) << followed.DebugString();
}

// Note [A model asleep] (profiler/model_execution.cc): idle for idle_sleep, the model gives its device
// memory back down to its sleep_floor (a quarter of its budget here); the next request wakes it, with the
// same tokens, and its plans hold the placement again within the budget.
TEST(ExecutorE2E, AnIdleModelSleepsDownToItsFloorAndItsNextRequestWakesIt) {
  constexpr uint32_t kTokens = 8;
  DaemonProcess d({.config_yaml = "runtime: {executor: true}\nmodels: {tiny-llama: {policy: autouvm, device_budget: " +
                                  std::to_string(kBudget) + ", idle_sleep: 1500ms, sleep_floor: 0.25}}\n"});
  const std::string first = ProfileBoth(d, kTokens);
  EXPECT_EQ(Complete(d, kTokens), first);  // followed (and a wake, if it slept while its plans were made)
  const autouvm::v1::ExecutionStatus awake = Status(d).execution();
  EXPECT_FALSE(awake.asleep()) << awake.DebugString();
  ASSERT_TRUE(Eventually([&] { return Status(d).execution().asleep(); })) << d.Log();
  const autouvm::v1::ExecutionStatus asleep = Status(d).execution();
  EXPECT_GE(asleep.sleeps(), 1u) << asleep.DebugString();
  EXPECT_GE(asleep.sleeps(), awake.sleeps() + 1) << asleep.DebugString();  // a sleep after the request
  EXPECT_LE(asleep.resident_bytes(), kBudget / 4) << asleep.DebugString();
  EXPECT_GT(asleep.in_place_bytes(), kBudget / 2) << asleep.DebugString();  // the rest of the ~11 MiB
  EXPECT_TRUE(asleep.following().empty()) << asleep.DebugString();

  const uint64_t wakes_before = asleep.wakes();
  EXPECT_EQ(Complete(d, kTokens), first);
  const autouvm::v1::ExecutionStatus woken = Status(d).execution();
  EXPECT_EQ(woken.wakes(), wakes_before + 1) << woken.DebugString();
  EXPECT_GT(woken.last_wake_seconds(), 0) << woken.DebugString();
  EXPECT_GT(woken.followed_iterations(), asleep.followed_iterations()) << woken.DebugString();
  EXPECT_GT(woken.resident_bytes(), kBudget / 2) << woken.DebugString();  // the plan pins again
  EXPECT_LE(woken.peak_resident_bytes(), kBudget) << woken.DebugString();
  EXPECT_EQ(woken.abandoned_iterations(), 0u) << woken.last_error();
  // Idle again, it sleeps again.
  ASSERT_TRUE(Eventually([&] { return Status(d).execution().sleeps() > asleep.sleeps(); })) << d.Log();
}

grpc::Status SleepModel(DaemonProcess& d, const std::string& model, autouvm::v1::SleepModelResponse* resp) {
  autouvm::v1::SleepModelRequest req;
  req.set_model(model);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return d.admin()->SleepModel(&ctx, req, resp);
}

grpc::Status WakeModel(DaemonProcess& d, const std::string& model, autouvm::v1::WakeModelResponse* resp) {
  autouvm::v1::WakeModelRequest req;
  req.set_model(model);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return d.admin()->WakeModel(&ctx, req, resp);
}

// Admin SleepModel and WakeModel (Note [A model asleep]): on demand, with no idle_sleep. A sleep asked
// for while a stream runs waits for it to end, whole; the model asleep keeps nothing on the device (its
// floor is 0); WakeModel's idle pass follows the decode plan, which pins again; the tokens do not change.
TEST(ExecutorE2E, SleepModelAndWakeModelOnDemand) {
  constexpr uint32_t kTokens = 8;
  DaemonProcess d({.config_yaml = Config("autouvm", true)});
  const std::string first = ProfileBoth(d, kTokens);
  EXPECT_EQ(Complete(d, kTokens), first);

  grpc::ClientContext stream_ctx;
  auto stream = d.generation()->GenerateStream(&stream_ctx, GreedyRequest(kModel, kPrompt, 40));
  autouvm::v1::GenerateStreamResponse msg;
  ASSERT_TRUE(stream->Read(&msg));
  autouvm::v1::SleepModelResponse slept;
  const grpc::Status s = SleepModel(d, kModel, &slept);
  ASSERT_TRUE(s.ok()) << s.error_message();
  uint32_t completion = 0;
  do {
    if (msg.has_final()) completion = msg.final().usage().completion_tokens();
  } while (stream->Read(&msg));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(completion, 40u);
  const autouvm::v1::ExecutionStatus& asleep = slept.model().execution();
  EXPECT_TRUE(asleep.asleep()) << asleep.DebugString();
  EXPECT_EQ(asleep.sleeps(), 1u) << asleep.DebugString();
  EXPECT_EQ(asleep.resident_bytes(), 0) << asleep.DebugString();
  EXPECT_TRUE(SleepModel(d, kModel, &slept).ok());  // asleep already
  EXPECT_EQ(slept.model().execution().sleeps(), 1u);

  autouvm::v1::WakeModelResponse woke;
  const grpc::Status w = WakeModel(d, kModel, &woke);
  ASSERT_TRUE(w.ok()) << w.error_message();
  const autouvm::v1::ExecutionStatus& awake = woke.model().execution();
  EXPECT_FALSE(awake.asleep()) << awake.DebugString();
  EXPECT_EQ(awake.wakes(), 1u) << awake.DebugString();
  EXPECT_GT(awake.resident_bytes(), kBudget / 2) << awake.DebugString();  // the decode plan pins
  EXPECT_LE(awake.peak_resident_bytes(), kBudget) << awake.DebugString();
  EXPECT_TRUE(WakeModel(d, kModel, &woke).ok());  // awake already
  EXPECT_EQ(woke.model().execution().wakes(), 1u);
  EXPECT_EQ(Complete(d, kTokens), first);
  EXPECT_EQ(SleepModel(d, "nope", &slept).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(ExecutorE2E, StockFollowsNothingAndGeneratesWhatAutouvmGenerates) {
  constexpr uint32_t kTokens = 6;
  DaemonProcess autouvm({.config_yaml = Config("autouvm", true)});
  const std::string first = ProfileBoth(autouvm, kTokens);
  const std::string followed = Complete(autouvm, kTokens);
  EXPECT_EQ(followed, first);
  EXPECT_GT(Status(autouvm).execution().followed_iterations(), 0u);

  DaemonProcess stock({.config_yaml = Config("stock", true)});
  EXPECT_EQ(ProfileBoth(stock, kTokens), first);
  EXPECT_EQ(Complete(stock, kTokens), followed);
  const autouvm::v1::ModelStatus s = Status(stock);
  EXPECT_EQ(s.execution().followed_iterations(), 0u) << s.DebugString();
  EXPECT_EQ(s.execution().plan_switches(), 0u) << s.DebugString();
  // `stock` keeps no budget: nothing to give back.
  autouvm::v1::SleepModelResponse slept;
  const grpc::Status refused = SleepModel(stock, kModel, &slept);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_NE(refused.error_message().find("policy stock"), std::string::npos) << refused.error_message();
}

TEST(ExecutorE2E, TurnedOffTheDaemonReportsNoExecution) {
  DaemonProcess d({.config_yaml = Config("autouvm", false)});
  const std::string first = ProfileBoth(d, 4);
  EXPECT_EQ(Complete(d, 4), first);
  EXPECT_FALSE(Status(d).has_execution());
}

}  // namespace
}  // namespace autouvm::testing
