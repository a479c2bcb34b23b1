// End-to-end: profiling on the real daemon — the first request of a shape is served while it is
// profiled in the background; the profile survives a restart, is rebuilt when damaged on disk or when
// it no longer matches the ops the model runs, is re-made on Reprofile; the database stays consistent
// through kill -9; profiles move between daemons as bundles; admin calls need the token when one is set;
// a profile store that cannot be opened leaves the daemon serving, with a health detail.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "engine/llama_builder.h"
#include "profiler/profile_codec.h"
#include "profiler/profile_key.h"
#include "profiler/profile_store.h"
#include "tests/e2e/daemon_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using autouvm::v1::GetProfileRequest;
using autouvm::v1::GetProfileResponse;
using autouvm::v1::ProfileState;
using grpc::health::v1::HealthCheckResponse;

constexpr char kModel[] = "tiny-llama";
// These tests are of profiling on demand (a shape recorded at its first request): without the plans made
// at load (Note [Plans before the first request], which PlanAtLoadPlansEveryPhaseBeforeTheModelIsServed checks).
constexpr char kOnDemand[] = "model_defaults: {plan_at_load: false}\n";

grpc::Status Generate(DaemonProcess& d, const std::string& text, uint32_t max_tokens) {
  autouvm::v1::GenerateResponse resp;
  grpc::Status s = CallGenerate(d, GreedyRequest(kModel, text, max_tokens), &resp);
  if (s.ok() && resp.usage().completion_tokens() != max_tokens) return {grpc::StatusCode::INTERNAL, "short completion"};
  return s;
}

autouvm::v1::ShapeBucket Decode(int batch) {
  autouvm::v1::ShapeBucket s;
  s.set_phase(autouvm::v1::PHASE_DECODE);
  s.set_batch(batch);
  return s;
}

// Calls an Admin method with an optional bearer token.
template <typename Req, typename Resp, typename Method>
grpc::Status Call(DaemonProcess& d, Method method, const Req& req, Resp* resp, const std::string& token = "") {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  return (d.admin()->*method)(&ctx, req, resp);
}

GetProfileResponse Profile(DaemonProcess& d, const autouvm::v1::ShapeBucket& shape, bool full = false) {
  GetProfileRequest req;
  req.set_model(kModel);
  *req.mutable_shape() = shape;
  req.set_include_profile(full);
  GetProfileResponse resp;
  grpc::Status s = Call(d, &autouvm::v1::Admin::Stub::GetProfile, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

autouvm::v1::ServerStatus Server(DaemonProcess& d) {
  autouvm::v1::ServerStatus resp;
  grpc::Status s = Call(d, &autouvm::v1::Admin::Stub::GetServerStatus, autouvm::v1::GetServerStatusRequest(), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

// Polls (every 20 ms, up to 60 s) until `done`; the background analysis has no event a client can wait on.
// Whether the shape's profile is ready (an error, such as DATA_LOSS before a damaged entry is replaced,
// is "not yet").
bool Ready(DaemonProcess& d, const autouvm::v1::ShapeBucket& shape) {
  GetProfileRequest req;
  req.set_model(kModel);
  *req.mutable_shape() = shape;
  GetProfileResponse resp;
  return Call(d, &autouvm::v1::Admin::Stub::GetProfile, req, &resp).ok() &&
         resp.summary().state() == autouvm::v1::PROFILE_STATE_READY;
}

std::vector<ProfileState> History(const autouvm::v1::ProfileSummary& s) {
  std::vector<ProfileState> out;
  for (const auto& h : s.history()) out.push_back(h.state());
  return out;
}

void StartServing(DaemonProcess& d) {
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
}

void Restart(DaemonProcess& d) {
  d.Signal(SIGTERM);
  ASSERT_EQ(d.Wait(), 0) << d.Log();
  StartServing(d);
}

// Profiles the decode (batch 1) and prefill shapes of one short request and waits for both.
void ProfileOnce(DaemonProcess& d) {
  ASSERT_TRUE(Generate(d, "hello", 4).ok());
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); })) << Profile(d, Decode(1)).DebugString();
}

using S = ProfileState;
constexpr S kUnprofiled = autouvm::v1::PROFILE_STATE_UNPROFILED, kRecording = autouvm::v1::PROFILE_STATE_RECORDING,
            kAnalyzing = autouvm::v1::PROFILE_STATE_ANALYZING, kReady = autouvm::v1::PROFILE_STATE_READY,
            kStale = autouvm::v1::PROFILE_STATE_STALE;

TEST(ProfileE2E, TheFirstRequestIsServedWhileItsShapesAreProfiledInTheBackground) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  const GetProfileResponse before = Profile(d, Decode(1));
  EXPECT_EQ(before.summary().state(), kUnprofiled);
  EXPECT_FALSE(before.summary().stored());

  ASSERT_TRUE(Generate(d, "hello", 4).ok());  // served in full, not held for profiling
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); }));
  const GetProfileResponse after = Profile(d, Decode(1), /*full=*/true);
  EXPECT_EQ(History(after.summary()), (std::vector<S>{kUnprofiled, kRecording, kAnalyzing, kReady}));
  EXPECT_TRUE(after.summary().stored());
  EXPECT_GT(after.summary().ops(), 20);
  EXPECT_EQ(after.summary().ops(), after.profile().trace().ops_size());
  EXPECT_GT(after.summary().bytes_per_iteration(), 0);
  // The tiny model fits the budget (0.9 of an H200): the plan pins all of it and streams nothing.
  EXPECT_EQ(after.summary().pinned_bytes(), after.summary().bytes_per_iteration());
  EXPECT_EQ(after.summary().streamed_bytes(), 0);
  EXPECT_EQ(after.summary().link_bound_ops(), 0);
  EXPECT_EQ(after.plan().key().SerializeAsString(), after.summary().profile_key().SerializeAsString());
  EXPECT_GT(after.summary().profiling_seconds(), 0);

  // GetModelStatus lists the shapes seen: the prefill bucket of the prompt and decode batch 1.
  autouvm::v1::GetModelStatusRequest sreq;
  sreq.set_model(kModel);
  autouvm::v1::ModelStatus status;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &status).ok());
  ASSERT_TRUE(Eventually([&] {
    autouvm::v1::ModelStatus st;
    Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &st);
    int ready = 0;
    for (const auto& p : st.profiles()) ready += p.state() == kReady;
    status = st;
    return ready == 2;
  })) << status.DebugString();
  EXPECT_EQ(status.model_digest().size(), 64u);
  EXPECT_EQ(status.policy(), "autouvm");
  bool prefill = false;
  for (const auto& p : status.profiles()) prefill |= p.profile_key().phase() == autouvm::v1::PHASE_PREFILL;
  EXPECT_TRUE(prefill);
}

// Note [Plans before the first request]: with plan_at_load the model becomes READY only once a decode, a
// prefill and a mixed shape each have a checked plan and were run following it, so a request's passes all
// follow a plan (its own or the nearest), and a restart checks the stored profiles before serving.
TEST(ProfileE2E, PlanAtLoadPlansEveryPhaseBeforeTheModelIsServed) {
  DaemonProcess d({.config_yaml = "model_defaults: {plan_at_load: true}"});
  autouvm::v1::GetModelStatusRequest sreq;
  sreq.set_model(kModel);
  for (int start = 0; start < 2; ++start) {
    if (start == 0) {
      StartServing(d);
    } else {
      Restart(d);
    }
    autouvm::v1::ModelStatus status;
    ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &status).ok());
    std::set<autouvm::v1::Phase> phases;
    for (const auto& p : status.profiles()) {
      EXPECT_EQ(p.state(), kReady) << p.DebugString();
      phases.insert(p.profile_key().phase());
    }
    EXPECT_EQ(phases, (std::set<autouvm::v1::Phase>{autouvm::v1::PHASE_PREFILL, autouvm::v1::PHASE_DECODE,
                                                    autouvm::v1::PHASE_MIXED}))
        << status.DebugString();
    // Recorded (the first start) or checked (the restart) once each, then followed once each.
    EXPECT_EQ(status.passes_own_plan(), 3u) << "start " << start;
    EXPECT_EQ(status.passes_no_plan(), 3u) << "start " << start;
    EXPECT_NE(d.Log().find("planned 3 shapes before serving"), std::string::npos) << d.Log();
    ASSERT_TRUE(Generate(d, "hello", 4).ok());
    ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &status).ok());
    EXPECT_EQ(status.passes_no_plan(), 3u) << "a request's pass ran with no plan: " << status.DebugString();
    EXPECT_GE(status.passes_own_plan() + status.passes_nearest_plan(), 3u + 4u);
  }
  const GetProfileResponse decode = Profile(d, Decode(1));
  EXPECT_EQ(History(decode.summary()), (std::vector<S>{kUnprofiled, kReady, kReady})) << decode.DebugString();
}

TEST(ProfileE2E, ARestartKeepsTheProfileAndChecksItInsteadOfProfilingAgain) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  ProfileOnce(d);
  const int64_t created = Profile(d, Decode(1)).summary().created_unix_ms();
  Restart(d);
  EXPECT_EQ(Profile(d, Decode(1)).summary().state(), kReady);  // stored, not seen yet
  ASSERT_TRUE(Generate(d, "hello", 4).ok());
  ASSERT_TRUE(Generate(d, "hello", 4).ok());  // the first use of the stored profile observes its ops
  ASSERT_TRUE(Eventually([&] { return Profile(d, Decode(1)).summary().history_size() == 3; }));
  const auto s = Profile(d, Decode(1)).summary();
  EXPECT_EQ(History(s), (std::vector<S>{kUnprofiled, kReady, kReady}));  // never recorded again
  EXPECT_EQ(s.history(1).reason(), "found in the profile store");
  EXPECT_EQ(s.history(2).reason(), "its " + std::to_string(s.ops()) + " ops match a served iteration");
  EXPECT_EQ(s.created_unix_ms(), created);
  EXPECT_EQ(Server(d).identity_mismatches_total(), 0u);
}

TEST(ProfileE2E, AChangedModelFileIsANewModelToItsProfiles) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  ProfileOnce(d);
  autouvm::v1::GetModelStatusRequest sreq;
  sreq.set_model(kModel);
  autouvm::v1::ModelStatus before;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &before).ok());
  d.Signal(SIGTERM);
  ASSERT_EQ(d.Wait(), 0) << d.Log();
  std::ofstream(d.repository() + "/" + kModel + "/model.yaml", std::ios::app) << "# edited\n";
  StartServing(d);
  autouvm::v1::ModelStatus after;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetModelStatus, sreq, &after).ok());
  EXPECT_NE(after.model_digest(), before.model_digest());
  EXPECT_EQ(Profile(d, Decode(1)).summary().state(), kUnprofiled);  // the old profile is not applied
  ASSERT_TRUE(Generate(d, "hello", 4).ok());
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); }));
  EXPECT_EQ(History(Profile(d, Decode(1)).summary()), (std::vector<S>{kUnprofiled, kRecording, kAnalyzing, kReady}));
}

TEST(ProfileE2E, ReprofileMakesANewProfileAtTheNextRequestOrAtOnce) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  ProfileOnce(d);
  const int64_t first = Profile(d, Decode(1)).summary().created_unix_ms();

  autouvm::v1::ReprofileRequest req;
  req.set_model(kModel);
  *req.mutable_shape() = Decode(1);
  autouvm::v1::ReprofileResponse resp;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp).ok());
  ASSERT_EQ(resp.profiles_size(), 1);
  EXPECT_EQ(resp.profiles(0).state(), kStale);
  EXPECT_EQ(Profile(d, Decode(1)).summary().state(), kStale);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a later created_unix_ms
  ASSERT_TRUE(Generate(d, "hello", 2).ok());
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); }));
  const int64_t second = Profile(d, Decode(1)).summary().created_unix_ms();
  EXPECT_GT(second, first);

  // With `now`, on an idle slot without any request: decode batch 2, never seen before, and all shapes.
  *req.mutable_shape() = Decode(2);
  req.set_now(true);
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp).ok());
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(2)); })) << Profile(d, Decode(2)).DebugString();
  req.clear_shape();
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp).ok());
  EXPECT_EQ(resp.profiles_size(), 3);  // prefill bucket, decode b1, decode b2
  ASSERT_TRUE(Eventually([&] {
    autouvm::v1::ListProfilesRequest lreq;
    autouvm::v1::ListProfilesResponse list;
    Call(d, &autouvm::v1::Admin::Stub::ListProfiles, lreq, &list);
    int ready = 0;
    for (const auto& p : list.profiles()) ready += p.state() == kReady && p.created_unix_ms() > second;
    return ready == 3;
  }));

  // Errors: an unknown model; a shape the model cannot run.
  req.set_model("nope");
  grpc::Status s = Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  req.set_model(kModel);
  *req.mutable_shape() = Decode(1000);
  s = Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("shape.batch"), std::string::npos) << s.error_message();
}

// Decode shapes are bucketed by batch to powers of two: batches 5 and 6 are b8. A model of max_batch 6
// can still have b8 profiled at once (its iteration runs 6 rows, within the bucket), and batch 5 is served
// by that profile; a batch above max_batch is refused naming shape.batch.
TEST(ProfileE2E, ReprofileNowRunsABucketAtTheLargestBatchTheModelHolds) {
  DaemonProcess d({.config_yaml = std::string(kOnDemand) + "models: {tiny-llama: {max_batch: 6}}"});
  StartServing(d);
  autouvm::v1::ReprofileRequest req;
  req.set_model(kModel);
  *req.mutable_shape() = Decode(5);
  req.set_now(true);
  autouvm::v1::ReprofileResponse resp;
  grpc::Status s = Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.profiles_size(), 1);
  EXPECT_EQ(resp.profiles(0).profile_key().batch(), 8);
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(6)); })) << Profile(d, Decode(5)).DebugString();
  EXPECT_EQ(Profile(d, Decode(5)).summary().key(), Profile(d, Decode(6)).summary().key());
  EXPECT_NE(Profile(d, Decode(5)).summary().key().find("/decode/b8/"), std::string::npos);
  *req.mutable_shape() = Decode(7);
  s = Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("shape.batch"), std::string::npos) << s.error_message();
}

TEST(ProfileE2E, ReprofileWhileTheModelLoadsIsAFailedPrecondition) {
  DaemonProcess d({.config_yaml = kOnDemand, .generate_default_model = false});
  // model.yaml is a FIFO: loading blocks on it until the test writes the text.
  ASSERT_TRUE(engine::WriteLlamaModel(engine::DefaultTinyModelConfig(kModel), 3, d.repository()).ok());
  const std::string yaml = d.repository() + "/" + kModel + "/model.yaml";
  std::ifstream in(yaml);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(yaml);
  ASSERT_EQ(mkfifo(yaml.c_str(), 0644), 0);
  ASSERT_TRUE(d.Start()) << d.Log();
  autouvm::v1::ReprofileRequest req;
  req.set_model(kModel);
  autouvm::v1::ReprofileResponse resp;
  grpc::Status s;
  ASSERT_TRUE(Eventually([&] {
    s = Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
    return s.error_code() != grpc::StatusCode::NOT_FOUND;  // listed once the repository is scanned
  })) << s.error_message()
      << d.Log();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("loading"), std::string::npos) << s.error_message();
  std::ofstream(yaml) << text;
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
}

TEST(ProfileE2E, ADamagedEntryOnDiskIsDetectedCountedAndRebuilt) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  ProfileOnce(d);
  const std::string key = Profile(d, Decode(1)).summary().key();
  d.Signal(SIGTERM);
  ASSERT_EQ(d.Wait(), 0) << d.Log();
  {
    auto store = profiler::OpenRocksDbProfileStore(d.state_dir() + "/profiles");
    ASSERT_TRUE(store.ok()) << store.status();
    auto value = (*store)->Get(profiler::Family::kProfiles, key);
    ASSERT_TRUE(value.ok() && value->has_value());
    std::string damaged = **value;
    damaged[damaged.size() / 2] ^= 0x40;  // one flipped bit in the payload
    ASSERT_TRUE((*store)->Write({{profiler::Family::kProfiles, key, damaged}}).ok());
  }
  StartServing(d);
  GetProfileRequest req;
  req.set_model(kModel);
  req.set_key(key);
  GetProfileResponse resp;
  grpc::Status s = Call(d, &autouvm::v1::Admin::Stub::GetProfile, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();
  ASSERT_TRUE(Generate(d, "hello", 4).ok());  // still served; the key is profiled again
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); }));
  EXPECT_EQ(History(Profile(d, Decode(1)).summary()), (std::vector<S>{kUnprofiled, kRecording, kAnalyzing, kReady}));
  EXPECT_NE(Profile(d, Decode(1)).summary().history(1).reason().find("checksum"), std::string::npos);
  EXPECT_NE(d.Log().find("autouvmd: profiler: profile " + key + ": checksum mismatch; profiling"), std::string::npos)
      << d.Log();
  EXPECT_GE(Server(d).corrupt_profiles_total(), 1u);
  EXPECT_TRUE(Call(d, &autouvm::v1::Admin::Stub::GetProfile, req, &resp).ok());
}

TEST(ProfileE2E, AProfileWhoseOpsDoNotMatchTheModelIsMadeStaleAndRebuilt) {
  DaemonProcess d({.config_yaml = kOnDemand});
  StartServing(d);
  ProfileOnce(d);
  autouvm::v1::ExportProfilesRequest ereq;
  autouvm::v1::ProfileBundle bundle;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::ExportProfiles, ereq, &bundle).ok());
  const std::string key = Profile(d, Decode(1)).summary().key();
  // A profile of the right key whose third op is another one (as after a libtorch upgrade).
  for (auto& e : *bundle.mutable_entries()) {
    if (e.key() != key) continue;
    auto p = profiler::OpenValue<autouvm::v1::Profile>(e.profile(), "profile");
    ASSERT_TRUE(p.ok());
    p->mutable_trace()->mutable_ops(2)->set_kernel("aten::bogus#0");
    e.set_profile(profiler::SealValue(*p));
  }
  autouvm::v1::ImportProfilesRequest ireq;
  *ireq.mutable_bundle() = bundle;
  ireq.set_overwrite(true);
  autouvm::v1::ImportProfilesResponse iresp;
  ASSERT_TRUE(Call(d, &autouvm::v1::Admin::Stub::ImportProfiles, ireq, &iresp).ok());
  EXPECT_EQ(iresp.imported(), bundle.entries_size());
  ASSERT_TRUE(Generate(d, "hello", 4).ok());  // looks the key up again, observes, finds the mismatch
  ASSERT_TRUE(Eventually([&] { return Server(d).identity_mismatches_total() == 1; }));
  EXPECT_EQ(Server(d).mismatched_ops_total(), 1u);  // one op renamed; the rest line up
  ASSERT_TRUE(Generate(d, "hello", 4).ok());        // records again
  ASSERT_TRUE(Eventually([&] { return Ready(d, Decode(1)); }));
  const auto s = Profile(d, Decode(1)).summary();
  EXPECT_EQ(History(s), (std::vector<S>{kUnprofiled, kReady, kStale, kRecording, kAnalyzing, kReady}));
  EXPECT_NE(s.history(2).reason().find("op 2 ran"), std::string::npos) << s.history(2).reason();
}

// With the daemon dead: opens its database as the daemon would and checks every entry — each profile has
// its plan (they are written in one batch), and every value opens (its checksum holds, it parses).
// Returns how many profiles it holds.
size_t ExpectConsistentStore(DaemonProcess& d, const std::string& when) {
  auto store = profiler::OpenRocksDbProfileStore(d.state_dir() + "/profiles");
  EXPECT_TRUE(store.ok()) << when << ": " << store.status();
  if (!store.ok()) return 0;
  auto profiles = (*store)->List(profiler::Family::kProfiles, "");
  auto plans = (*store)->List(profiler::Family::kPlans, "");
  EXPECT_TRUE(profiles.ok() && plans.ok()) << when;
  if (!profiles.ok() || !plans.ok()) return 0;
  EXPECT_EQ(profiles->size(), plans->size()) << when;  // written together or not at all
  for (size_t i = 0; i < std::min(profiles->size(), plans->size()); ++i) {
    EXPECT_EQ((*profiles)[i].key, (*plans)[i].key) << when;
    EXPECT_TRUE(profiler::OpenValue<autouvm::v1::Profile>((*profiles)[i].value, "profile").ok()) << when;
    EXPECT_TRUE(profiler::OpenValue<autouvm::v1::Plan>((*plans)[i].value, "plan").ok()) << when;
  }
  return profiles->size();
}

TEST(ProfileE2E, KillNineWhileProfilingLeavesAConsistentDatabase) {
  DaemonProcess d({.config_yaml = kOnDemand});
  // Several rounds, each killed at a different moment of profiling new shapes (prefill buckets).
  for (int round = 0; round < 4; ++round) {
    StartServing(d);
    std::thread load([&] { (void)Generate(d, std::string(static_cast<size_t>(4 << round), 'x'), 3); });
    std::this_thread::sleep_for(std::chrono::milliseconds(15 * round));
    d.Signal(SIGKILL);
    load.join();
    d.Wait();
    ExpectConsistentStore(d, "round " + std::to_string(round));
  }
  StartServing(d);  // and the daemon serves on it, profiling what is missing
  ProfileOnce(d);
  EXPECT_TRUE(Server(d).health_details().empty());
}

// Crash safety, at random moments: each round restarts the daemon on what the last kill -9 left, checks
// that it serves at once, sets it profiling (prompts of random lengths: new prefill buckets; several at
// a time: new decode batches; sometimes a re-profile of everything at once), and kills it -9 after a
// random 0-400 ms — before, during or after the store's writes. After each kill the database must be
// consistent. AUTOUVM_CRASH_ROUNDS (default 12) and AUTOUVM_CRASH_SEED replay or extend a run.
TEST(ProfileE2E, KillNineAtRandomMomentsOfProfilingNeverLeavesTheDatabaseInconsistent) {
  int rounds = 12;
  if (const char* env = std::getenv("AUTOUVM_CRASH_ROUNDS"); env != nullptr) rounds = std::atoi(env);
  uint32_t seed = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (const char* env = std::getenv("AUTOUVM_CRASH_SEED"); env != nullptr) seed = static_cast<uint32_t>(std::atol(env));
  std::cout << "crash safety: " << rounds << " rounds, AUTOUVM_CRASH_SEED=" << seed << "\n";
  std::mt19937 rng(seed);
  DaemonProcess d({.config_yaml = kOnDemand});
  size_t most = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string when = "round " + std::to_string(round) + " (AUTOUVM_CRASH_SEED=" + std::to_string(seed) + ")";
    StartServing(d);
    ASSERT_TRUE(Generate(d, "served after the kill", 2).ok()) << when << "\n" << d.Log();
    std::vector<std::thread> load;
    const int streams = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < streams; ++k) {
      const size_t len = 1 + rng() % 300;
      load.emplace_back([&d, len, k] { (void)Generate(d, std::string(len, static_cast<char>('a' + k)), 6); });
    }
    if (rng() % 3 == 0) {
      load.emplace_back([&d] {
        autouvm::v1::ReprofileRequest req;
        req.set_model(kModel);
        req.set_now(true);
        autouvm::v1::ReprofileResponse resp;
        (void)Call(d, &autouvm::v1::Admin::Stub::Reprofile, req, &resp);
      });
    }
    const int delay_ms = static_cast<int>(rng() % 400);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    d.Signal(SIGKILL);
    for (std::thread& t : load) t.join();
    d.Wait();
    const size_t profiles = ExpectConsistentStore(d, when + ", killed after " + std::to_string(delay_ms) + " ms");
    most = std::max(most, profiles);
    if (::testing::Test::HasFailure()) break;
  }
  std::cout << "crash safety: at most " << most << " profiles stored at a kill\n";
  EXPECT_GT(most, 0u) << "no kill came after a write: the rounds did not reach the store";
  StartServing(d);
  ProfileOnce(d);
  EXPECT_TRUE(Server(d).health_details().empty());
}

TEST(ProfileE2E, ProfilesExportedFromOneDaemonMakeAnotherStartReady) {
  DaemonProcess a({.config_yaml = kOnDemand});
  StartServing(a);
  ProfileOnce(a);
  autouvm::v1::ExportProfilesRequest ereq;
  ereq.set_model(kModel);
  autouvm::v1::ProfileBundle bundle;
  ASSERT_TRUE(Call(a, &autouvm::v1::Admin::Stub::ExportProfiles, ereq, &bundle).ok());
  ASSERT_GE(bundle.entries_size(), 2);  // the prefill bucket and decode b1

  DaemonProcess b({.config_yaml = kOnDemand});
  StartServing(b);
  autouvm::v1::ImportProfilesRequest ireq;
  *ireq.mutable_bundle() = bundle;
  // One tampered entry besides: refused with its key named, the others imported.
  autouvm::v1::BundleEntry bad = bundle.entries(0);
  bad.set_key(bad.key() + "x");
  *ireq.mutable_bundle()->add_entries() = bad;
  // And one whose plan no planner makes, sealed as the store seals it: refused naming the field.
  autouvm::v1::BundleEntry unplannable = bundle.entries(0);
  {
    auto plan = profiler::OpenValue<autouvm::v1::Plan>(unplannable.plan(), "plan");
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan->set_budget_bytes(-1);
    unplannable.set_plan(profiler::SealValue(*plan));
  }
  *ireq.mutable_bundle()->add_entries() = unplannable;
  autouvm::v1::ImportProfilesResponse iresp;
  ASSERT_TRUE(Call(b, &autouvm::v1::Admin::Stub::ImportProfiles, ireq, &iresp).ok());
  EXPECT_EQ(iresp.imported(), bundle.entries_size());
  ASSERT_EQ(iresp.errors_size(), 2);
  EXPECT_EQ(iresp.errors(0).rfind(bad.key() + ": ", 0), 0u) << iresp.errors(0);
  EXPECT_EQ(iresp.errors(1), unplannable.key() + ": plan: budget_bytes is -1, below 0");
  // Again without overwrite: everything is there already.
  ASSERT_TRUE(Call(b, &autouvm::v1::Admin::Stub::ImportProfiles, ireq, &iresp).ok());
  EXPECT_EQ(iresp.skipped(), bundle.entries_size());

  ASSERT_TRUE(Generate(b, "hello", 4).ok());
  ASSERT_TRUE(Generate(b, "hello", 4).ok());
  ASSERT_TRUE(Eventually([&] { return Profile(b, Decode(1)).summary().history_size() == 3; }));
  const auto s = Profile(b, Decode(1)).summary();
  EXPECT_EQ(History(s), (std::vector<S>{kUnprofiled, kReady, kReady}));  // never recorded on b; checked
  EXPECT_NE(s.history(2).reason().find("match a served iteration"), std::string::npos) << s.history(2).reason();
  EXPECT_EQ(s.created_unix_ms(), Profile(a, Decode(1)).summary().created_unix_ms());
  EXPECT_EQ(Server(b).identity_mismatches_total(), 0u);
}

TEST(ProfileE2E, AdminCallsNeedTheTokenWhenOneIsSet) {
  TempDir dir;
  std::ofstream(dir.Sub("token")) << "s3cret\n";
  DaemonProcess d({.config_yaml = "admin: {token_file: " + dir.Sub("token") + "}"});
  StartServing(d);
  autouvm::v1::ListModelsRequest req;
  autouvm::v1::ListModelsResponse resp;
  EXPECT_EQ(Call(d, &autouvm::v1::Admin::Stub::ListModels, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call(d, &autouvm::v1::Admin::Stub::ListModels, req, &resp, "wrong").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Call(d, &autouvm::v1::Admin::Stub::ListModels, req, &resp, "s3cret").error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(resp.models_size(), 1);
  autouvm::v1::ServerStatus st;
  EXPECT_TRUE(
      Call(d, &autouvm::v1::Admin::Stub::GetServerStatus, autouvm::v1::GetServerStatusRequest(), &st, "s3cret").ok());
  EXPECT_TRUE(st.admin_auth());
  EXPECT_TRUE(Generate(d, "hello", 2).ok());  // generation is not an admin call
}

TEST(ProfileE2E, AnEmptyAdminTokenFileStopsStartUpNamingIt) {
  TempDir dir;
  std::ofstream(dir.Sub("token")) << "\n";
  DaemonProcess d({.config_yaml = "admin: {token_file: " + dir.Sub("token") + "}"});
  EXPECT_FALSE(d.Start());
  EXPECT_NE(d.Wait(), 0);
  EXPECT_NE(d.Log().find("admin.token_file: " + dir.Sub("token") + " is empty"), std::string::npos) << d.Log();
}

TEST(ProfileE2E, AProfileStoreThatCannotBeOpenedLeavesTheDaemonServingInMemory) {
  DaemonProcess d({.config_yaml = kOnDemand});
  std::filesystem::create_directories(d.state_dir());
  std::ofstream(d.state_dir() + "/profiles") << "not a directory";
  StartServing(d);
  ProfileOnce(d);  // profiles still work, in memory
  const auto st = Server(d);
  EXPECT_EQ(st.profile_store(), "memory");
  ASSERT_EQ(st.health_details_size(), 1);
  EXPECT_NE(st.health_details(0).find("profile store"), std::string::npos) << st.health_details(0);
  EXPECT_NE(st.health_details(0).find(d.state_dir() + "/profiles"), std::string::npos) << st.health_details(0);
}

}  // namespace
}  // namespace autouvm::testing
