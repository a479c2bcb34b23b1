// Hostile input, table-driven, against the real daemon: every field of every RPC with the kinds of bad
// value a client can send (empty, huge, negative, NaN and infinities, invalid UTF-8, unknown enum values,
// too many entries, an oversized message). Each must come back with the exact gRPC code and a message
// naming the field, and the daemon must go on serving: a good request after every bad one.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using autouvm::v1::GenerateRequest;
using grpc::StatusCode;

constexpr char kModel[] = "tiny-llama";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const std::string kBadUtf8 = "ab\xc3\x28z";  // a lead byte followed by a non-continuation byte

struct Case {
  std::string name;
  StatusCode code;
  std::string names;  // what the message must contain: the field
};

class BadInputE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new DaemonProcess();
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    ASSERT_TRUE(daemon_->WaitForHealth(grpc::health::v1::HealthCheckResponse::SERVING)) << daemon_->Log();
    grpc::ClientContext ctx;
    autouvm::v1::GetModelStatusRequest req;
    req.set_model(kModel);
    autouvm::v1::ModelStatus status;
    ASSERT_TRUE(daemon_->admin()->GetModelStatus(&ctx, req, &status).ok());
    vocab_ = static_cast<int32_t>(status.info().vocab_size());
    max_seq_ = static_cast<int32_t>(status.info().max_seq());
    max_batch_ = static_cast<int32_t>(status.max_batch());
    ASSERT_GT(vocab_, 0);
    ASSERT_GT(max_seq_, 0);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }

  // The good request every case starts from and that must still be served after each bad one.
  static GenerateRequest Good() { return GreedyRequest(kModel, "hello there", 2); }

  static void ExpectServing(const std::string& after) {
    autouvm::v1::GenerateResponse response;
    const grpc::Status s = CallGenerate(*daemon_, Good(), &response);
    EXPECT_TRUE(s.ok()) << "after " << after << ": " << s.error_message() << "\n" << daemon_->Log();
    EXPECT_EQ(response.token_ids_size(), 2) << "after " << after;
  }

  static void ExpectStatus(const grpc::Status& s, const Case& c, const std::string& rpc) {
    EXPECT_EQ(s.error_code(), c.code) << rpc << " " << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.names), std::string::npos)
        << rpc << " " << c.name << ": \"" << s.error_message() << "\" does not name " << c.names;
  }

  // Sends the request by Generate and by GenerateStream (which must end with the status alone).
  static void ExpectRefused(const Case& c, const GenerateRequest& request) {
    ExpectStatus(CallGenerate(*daemon_, request), c, "Generate");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = daemon_->generation()->GenerateStream(&ctx, request);
    autouvm::v1::GenerateStreamResponse message;
    int messages = 0;
    while (reader->Read(&message)) ++messages;
    EXPECT_EQ(messages, 0) << "GenerateStream " << c.name << " sent messages before its error";
    ExpectStatus(reader->Finish(), c, "GenerateStream");
    ExpectServing(c.name);
  }

  static DaemonProcess* daemon_;
  static int32_t vocab_, max_seq_, max_batch_;
};

DaemonProcess* BadInputE2E::daemon_ = nullptr;
int32_t BadInputE2E::vocab_ = 0;
int32_t BadInputE2E::max_seq_ = 0;
int32_t BadInputE2E::max_batch_ = 0;

TEST_F(BadInputE2E, EveryFieldOfAGenerateRequest) {
  using Edit = std::function<void(GenerateRequest&)>;
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  std::vector<std::pair<Case, Edit>> cases = {
      // model
      {{"model empty", kInvalid, "model"}, [](auto& r) { r.set_model(""); }},
      {{"model unknown", StatusCode::NOT_FOUND, "model 'no-such-model'"},
       [](auto& r) { r.set_model("no-such-model"); }},
      {{"model huge", kInvalid, "model: longer than 256 bytes"},
       [](auto& r) { r.set_model(std::string(100000, 'm')); }},
      {{"model invalid UTF-8", kInvalid, "model"}, [](auto& r) { r.set_model(kBadUtf8); }},
      {{"model control characters", kInvalid, "model: control character 0x0a"},
       [](auto& r) { r.set_model("tiny-llama\n"); }},
      // prompt
      {{"no prompt", kInvalid, "prompt"}, [](auto& r) { r.clear_prompt(); }},
      {{"text empty", kInvalid, "text"}, [](auto& r) { r.set_text(""); }},
      {{"text over max_prompt_bytes", kInvalid, "text"}, [](auto& r) { r.set_text(std::string(1048577, 'a')); }},
      {{"text invalid UTF-8", kInvalid, "text"}, [](auto& r) { r.set_text(kBadUtf8); }},
      {{"text truncated UTF-8", kInvalid, "text"}, [](auto& r) { r.set_text("caf\xc3"); }},
      {{"text NUL bytes filling max_seq", kInvalid, "prompt"},
       [](auto& r) { r.set_text(std::string(static_cast<size_t>(max_seq_) * 4, '\0')); }},
      {{"token_ids empty", kInvalid, "token_ids"}, [](auto& r) { r.mutable_token_ids()->clear_ids(); }},
      {{"token_ids negative", kInvalid, "token_ids[1]"},
       [](auto& r) {
         r.mutable_token_ids()->add_ids(1);
         r.mutable_token_ids()->add_ids(-1);
       }},
      {{"token_ids vocab", kInvalid, "token_ids[0]"}, [](auto& r) { r.mutable_token_ids()->add_ids(vocab_); }},
      {{"token_ids INT32_MIN", kInvalid, "token_ids[0]"},
       [](auto& r) { r.mutable_token_ids()->add_ids(std::numeric_limits<int32_t>::min()); }},
      {{"token_ids INT32_MAX", kInvalid, "token_ids[0]"},
       [](auto& r) { r.mutable_token_ids()->add_ids(std::numeric_limits<int32_t>::max()); }},
      {{"token_ids filling max_seq", kInvalid, "prompt"},
       [](auto& r) {
         for (int i = 0; i < max_seq_; ++i) r.mutable_token_ids()->add_ids(1);
       }},
      // max_tokens
      {{"max_tokens UINT32_MAX", kInvalid, "max_tokens"},
       [](auto& r) { r.set_max_tokens(std::numeric_limits<uint32_t>::max()); }},
      // sampling
      {{"temperature negative", kInvalid, "sampling.temperature"},
       [](auto& r) { r.mutable_sampling()->set_temperature(-0.5f); }},
      {{"temperature NaN", kInvalid, "sampling.temperature"},
       [](auto& r) { r.mutable_sampling()->set_temperature(kNaN); }},
      {{"temperature +inf", kInvalid, "sampling.temperature"},
       [](auto& r) { r.mutable_sampling()->set_temperature(kInf); }},
      {{"temperature -inf", kInvalid, "sampling.temperature"},
       [](auto& r) { r.mutable_sampling()->set_temperature(-kInf); }},
      {{"top_k negative", kInvalid, "sampling.top_k"}, [](auto& r) { r.mutable_sampling()->set_top_k(-1); }},
      {{"top_k INT32_MIN", kInvalid, "sampling.top_k"},
       [](auto& r) { r.mutable_sampling()->set_top_k(std::numeric_limits<int32_t>::min()); }},
      {{"top_p zero", kInvalid, "sampling.top_p"}, [](auto& r) { r.mutable_sampling()->set_top_p(0); }},
      {{"top_p negative", kInvalid, "sampling.top_p"}, [](auto& r) { r.mutable_sampling()->set_top_p(-0.5f); }},
      {{"top_p above 1", kInvalid, "sampling.top_p"}, [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); }},
      {{"top_p NaN", kInvalid, "sampling.top_p"}, [](auto& r) { r.mutable_sampling()->set_top_p(kNaN); }},
      {{"top_p +inf", kInvalid, "sampling.top_p"}, [](auto& r) { r.mutable_sampling()->set_top_p(kInf); }},
      {{"repetition_penalty zero", kInvalid, "sampling.repetition_penalty"},
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(0); }},
      {{"repetition_penalty negative", kInvalid, "sampling.repetition_penalty"},
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(-2); }},
      {{"repetition_penalty NaN", kInvalid, "sampling.repetition_penalty"},
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(kNaN); }},
      {{"repetition_penalty +inf", kInvalid, "sampling.repetition_penalty"},
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(kInf); }},
      // stop_token_ids
      {{"stop_token_ids negative", kInvalid, "stop_token_ids[0]"}, [](auto& r) { r.add_stop_token_ids(-7); }},
      {{"stop_token_ids vocab", kInvalid, "stop_token_ids[1]"},
       [](auto& r) {
         r.add_stop_token_ids(2);
         r.add_stop_token_ids(vocab_);
       }},
      {{"stop_token_ids too many", kInvalid, "stop_token_ids"},
       [](auto& r) {
         for (int i = 0; i < 65; ++i) r.add_stop_token_ids(1);
       }},
      // stop
      {{"stop too many", kInvalid, "stop"},
       [](auto& r) {
         for (int i = 0; i < 17; ++i) r.add_stop("x");
       }},
      {{"stop empty", kInvalid, "stop[0]"}, [](auto& r) { r.add_stop(""); }},
      {{"stop too long", kInvalid, "stop[1]"},
       [](auto& r) {
         r.add_stop("ok");
         r.add_stop(std::string(257, 's'));
       }},
      {{"stop invalid UTF-8", kInvalid, "stop[0]"}, [](auto& r) { r.add_stop(kBadUtf8); }},
      // request_id
      {{"request_id too long", kInvalid, "request_id"}, [](auto& r) { r.set_request_id(std::string(257, 'r')); }},
      {{"request_id invalid UTF-8", kInvalid, "request_id"}, [](auto& r) { r.set_request_id(kBadUtf8); }},
      {{"request_id control characters", kInvalid, "request_id: control character 0x0a at byte 2"},
       [](auto& r) { r.set_request_id("id\nFAKE LOG LINE"); }},
      // logprobs (unset: none; 0..20)
      {{"logprobs above 20", kInvalid, "logprobs: must be in [0, 20], got 21"}, [](auto& r) { r.set_logprobs(21); }},
      {{"logprobs UINT32_MAX", kInvalid, "logprobs: must be in [0, 20], got 4294967295"},
       [](auto& r) { r.set_logprobs(std::numeric_limits<uint32_t>::max()); }},
      // the whole message: past server.limits.max_receive_message_bytes (4 MiB), refused by gRPC itself
      {{"oversized message", StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
       [](auto& r) { r.set_text(std::string(5 << 20, 'a')); }},
  };
  for (const auto& [c, edit] : cases) {
    SCOPED_TRACE(c.name);
    GenerateRequest request = Good();
    edit(request);
    ExpectRefused(c, request);
  }
  ASSERT_GT(daemon_->pid(), 0);
  EXPECT_EQ(kill(daemon_->pid(), 0), 0) << "the daemon is gone";
}

// The admin RPCs' fields. Each case calls one RPC with one bad field.
TEST_F(BadInputE2E, EveryFieldOfTheAdminRequests) {
  using namespace autouvm::v1;  // NOLINT: the request types
  const auto kInvalid = StatusCode::INVALID_ARGUMENT;
  auto call = [](auto method, const auto& request, auto* response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (daemon_->admin()->*method)(&ctx, request, response);
  };
  auto status_of = [&](const std::string& model) {
    GetModelStatusRequest r;
    r.set_model(model);
    ModelStatus out;
    return call(&Admin::Stub::GetModelStatus, r, &out);
  };
  auto reprofile = [&](const std::function<void(ShapeBucket*)>& shape) {
    ReprofileRequest r;
    r.set_model(kModel);
    shape(r.mutable_shape());
    ReprofileResponse out;
    return call(&Admin::Stub::Reprofile, r, &out);
  };
  auto get_profile = [&](const std::function<void(GetProfileRequest&)>& edit) {
    GetProfileRequest r;
    r.set_model(kModel);
    edit(r);
    GetProfileResponse out;
    return call(&Admin::Stub::GetProfile, r, &out);
  };
  auto delete_profile = [&](const std::string& key) {
    DeleteProfileRequest r;
    r.set_model(kModel);
    r.set_key(key);
    DeleteProfileResponse out;
    return call(&Admin::Stub::DeleteProfile, r, &out);
  };
  auto decode = [](int32_t batch) {
    return [batch](ShapeBucket* s) {
      s->set_phase(PHASE_DECODE);
      s->set_batch(batch);
    };
  };
  auto prefill = [](int32_t batch, int32_t prompt_len) {
    return [batch, prompt_len](ShapeBucket* s) {
      s->set_phase(PHASE_PREFILL);
      s->set_batch(batch);
      s->set_prompt_len(prompt_len);
    };
  };
  const std::vector<std::pair<Case, std::function<grpc::Status()>>> cases = {
      {{"GetModelStatus model empty", kInvalid, "model: must be set"}, [&] { return status_of(""); }},
      {{"GetModelStatus model unknown", StatusCode::NOT_FOUND, "model 'nope'"}, [&] { return status_of("nope"); }},
      {{"GetModelStatus model huge", kInvalid, "model: longer than 256 bytes"},
       [&] { return status_of(std::string(1 << 20, 'm')); }},
      {{"GetModelStatus model invalid UTF-8", kInvalid, "model: not valid UTF-8 at byte 2"},
       [&] { return status_of(kBadUtf8); }},
      {{"GetModelStatus model control character", kInvalid, "model: control character 0x00"},
       [&] { return status_of(std::string("tiny\0llama", 10)); }},
      {{"Reprofile model unknown", StatusCode::NOT_FOUND, "model 'nope'"},
       [&] {
         ReprofileRequest r;
         r.set_model("nope");
         ReprofileResponse out;
         return call(&Admin::Stub::Reprofile, r, &out);
       }},
      {{"Reprofile shape.phase unset", kInvalid, "shape.phase"}, [&] { return reprofile([](ShapeBucket*) {}); }},
      {{"Reprofile shape.phase unknown enum", kInvalid, "shape.phase"},
       [&] { return reprofile([](ShapeBucket* s) { s->set_phase(static_cast<Phase>(99)); }); }},
      {{"Reprofile shape.phase negative enum", kInvalid, "shape.phase"},
       [&] { return reprofile([](ShapeBucket* s) { s->set_phase(static_cast<Phase>(-5)); }); }},
      {{"Reprofile shape.batch zero", kInvalid, "shape.batch"}, [&] { return reprofile(decode(0)); }},
      {{"Reprofile shape.batch negative", kInvalid, "shape.batch"}, [&] { return reprofile(decode(-3)); }},
      {{"Reprofile shape.batch past max_batch", kInvalid, "shape.batch"},
       [&] { return reprofile(decode(max_batch_ + 1)); }},
      {{"Reprofile shape.batch INT32_MAX", kInvalid, "shape.batch"},
       [&] { return reprofile(decode(std::numeric_limits<int32_t>::max())); }},
      {{"Reprofile decode shape.prompt_len", kInvalid, "shape.prompt_len"},
       [&] {
         return reprofile([](ShapeBucket* s) {
           s->set_phase(PHASE_DECODE);
           s->set_batch(1);
           s->set_prompt_len(8);
         });
       }},
      {{"Reprofile prefill shape.prompt_len zero", kInvalid, "shape"}, [&] { return reprofile(prefill(1, 0)); }},
      {{"Reprofile prefill shape.prompt_len negative", kInvalid, "shape"}, [&] { return reprofile(prefill(1, -1)); }},
      {{"Reprofile prefill shape.prompt_len INT32_MAX", kInvalid, "shape.prompt_len"},
       [&] { return reprofile(prefill(1, std::numeric_limits<int32_t>::max())); }},
      // Prompts that arrive together share a prefill pass: a prefill shape's batch is within max_batch.
      {{"Reprofile prefill shape.batch past max_batch", kInvalid, "shape.batch"},
       [&] { return reprofile(prefill(max_batch_ + 1, 4)); }},
      {{"GetProfile neither key nor shape", kInvalid, "key, shape"}, [&] { return get_profile([](auto&) {}); }},
      {{"GetProfile key and shape", kInvalid, "key, shape"},
       [&] {
         return get_profile([](GetProfileRequest& r) {
           r.set_key("x");
           r.mutable_shape()->set_phase(PHASE_DECODE);
         });
       }},
      {{"GetProfile key garbage", kInvalid, "key"},
       [&] { return get_profile([](GetProfileRequest& r) { r.set_key("not/a/key"); }); }},
      {{"GetProfile key huge", kInvalid, "key"},
       [&] { return get_profile([](GetProfileRequest& r) { r.set_key(std::string(1 << 20, 'k')); }); }},
      {{"GetProfile key invalid UTF-8", kInvalid, "key: not valid UTF-8"},
       [&] { return get_profile([](GetProfileRequest& r) { r.set_key(kBadUtf8); }); }},
      {{"GetProfile shape.phase unknown enum", kInvalid, "shape.phase"},
       [&] {
         return get_profile([](GetProfileRequest& r) {
           r.mutable_shape()->set_phase(static_cast<Phase>(7));
           r.mutable_shape()->set_batch(1);
         });
       }},
      {{"DeleteProfile key garbage", kInvalid, "key"}, [&] { return delete_profile("%%%"); }},
      {{"DeleteProfile key empty, no shape", kInvalid, "key, shape"}, [&] { return delete_profile(""); }},
      {{"ListProfiles model invalid UTF-8", kInvalid, "model: not valid UTF-8"},
       [&] {
         ListProfilesRequest r;
         r.set_model(kBadUtf8);
         ListProfilesResponse out;
         return call(&Admin::Stub::ListProfiles, r, &out);
       }},
      {{"ExportProfiles model control character", kInvalid, "model: control character"},
       [&] {
         ExportProfilesRequest r;
         r.set_model("a\tb");
         ProfileBundle out;
         return call(&Admin::Stub::ExportProfiles, r, &out);
       }},
      {{"ImportProfiles bundle string invalid UTF-8", kInvalid, "bundle.entries[1].key: not valid UTF-8"},
       [&] {
         ImportProfilesRequest r;
         r.mutable_bundle()->add_entries()->set_key("k");
         r.mutable_bundle()->add_entries()->set_key(kBadUtf8);
         ImportProfilesResponse out;
         return call(&Admin::Stub::ImportProfiles, r, &out);
       }},
      {{"ImportProfiles oversized message", StatusCode::RESOURCE_EXHAUSTED, "larger than max"},
       [&] {
         ImportProfilesRequest r;
         r.mutable_bundle()->add_entries()->set_key(std::string(5 << 20, 'k'));
         ImportProfilesResponse out;
         return call(&Admin::Stub::ImportProfiles, r, &out);
       }},
  };
  for (const auto& [c, run] : cases) {
    SCOPED_TRACE(c.name);
    ExpectStatus(run(), c, "Admin");
    ExpectServing(c.name);
  }
}

// Bytes that are not a request at all, sent to every method: INVALID_ARGUMENT saying so, not gRPC's
// UNIMPLEMENTED without a word (Note [Requests that do not parse], proto/lenient_parse.h).
TEST_F(BadInputE2E, BytesThatAreNotARequest) {
  grpc::GenericStub stub(daemon_->channel());
  const std::string garbage("\x0a\xff\xff\xff\xff\x0f\x01", 7);  // field 1, a length past the end
  for (const std::string method :
       {"/autouvm.v1.Generation/Generate", "/autouvm.v1.Admin/GetModelStatus", "/autouvm.v1.Admin/ImportProfiles"}) {
    SCOPED_TRACE(method);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1), response;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(40), [&] { return done; }));
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("the request does not parse as autouvm.v1."), std::string::npos)
        << status.error_message();
  }
  ExpectServing("bytes that are not a request");
}

}  // namespace
}  // namespace autouvm::testing
