// End-to-end: the daemon's life — health before and after loading, a full queue, a model that fails to
// load while others serve, SIGTERM draining, and start-up errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/llama_builder.h"
#include "tests/e2e/daemon_process.h"
#include "tests/testing/eventually.h"

namespace autouvm::testing {
namespace {

using autouvm::v1::GenerateRequest;
using autouvm::v1::GenerateStreamResponse;
using grpc::health::v1::HealthCheckResponse;

GenerateRequest LongRequest(uint32_t max_tokens) {
  GenerateRequest r;
  r.set_model("tiny-llama");
  r.set_text("a long one");
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

HealthCheckResponse::ServingStatus Health(DaemonProcess& d) {
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  HealthCheckResponse resp;
  EXPECT_TRUE(d.health()->Check(&ctx, req, &resp).ok());
  return resp.status();
}

grpc::Status Unary(DaemonProcess& d, const GenerateRequest& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  autouvm::v1::GenerateResponse resp;
  return d.generation()->Generate(&ctx, req, &resp);
}

TEST(LifecycleE2E, HealthIsNotServingUntilTheModelsAreLoaded) {
  DaemonProcess d({.generate_default_model = false});
  // The entry's model.yaml is a FIFO: loading blocks on it until the test writes the file's text.
  const engine::ModelConfig c = engine::DefaultTinyModelConfig("tiny-llama");
  ASSERT_TRUE(engine::WriteLlamaModel(c, 3, d.repository()).ok());
  const std::string yaml = d.repository() + "/tiny-llama/model.yaml";
  std::ifstream in(yaml);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(yaml);
  ASSERT_EQ(mkfifo(yaml.c_str(), 0644), 0);

  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_EQ(Health(d), HealthCheckResponse::NOT_SERVING);
  grpc::Status s = Unary(d, LongRequest(2));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("loading"), std::string::npos) << s.error_message();

  std::ofstream(yaml) << text;  // unblocks the loader
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_TRUE(Unary(d, LongRequest(2)).ok());
}

TEST(LifecycleE2E, FullQueueIsResourceExhausted) {
  DaemonProcess d({.config_yaml = "models: {tiny-llama: {max_batch: 1, max_queue: 1}}"});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING));
  // A occupies the only slot, B waits in the only queue place, C is turned away.
  grpc::ClientContext ctx_a, ctx_b;
  auto a = d.generation()->GenerateStream(&ctx_a, LongRequest(450));
  GenerateStreamResponse msg;
  ASSERT_TRUE(a->Read(&msg));
  auto b = d.generation()->GenerateStream(&ctx_b, LongRequest(450));
  for (int i = 0; i < 3000; ++i) {
    grpc::ClientContext ctx;
    autouvm::v1::GetModelStatusRequest req;
    req.set_model("tiny-llama");
    autouvm::v1::ModelStatus st;
    ASSERT_TRUE(d.admin()->GetModelStatus(&ctx, req, &st).ok());
    if (st.queued_requests() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  grpc::Status c = Unary(d, LongRequest(2));
  EXPECT_EQ(c.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << c.error_message();
  EXPECT_NE(c.error_message().find("queue"), std::string::npos);
  ctx_a.TryCancel();
  ctx_b.TryCancel();
  while (a->Read(&msg)) {
  }
  while (b->Read(&msg)) {
  }
  EXPECT_EQ(a->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(b->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST(LifecycleE2E, SigtermDrainsTheRequestInFlightThenExitsZero) {
  DaemonProcess d({.extra_args = {"--drain-timeout", "240s"}});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING));
  grpc::ClientContext ctx;
  auto stream = d.generation()->GenerateStream(&ctx, LongRequest(120));
  GenerateStreamResponse msg;
  ASSERT_TRUE(stream->Read(&msg));  // generating

  d.Signal(SIGTERM);
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::NOT_SERVING)) << d.Log();
  grpc::Status late = Unary(d, LongRequest(2));
  EXPECT_EQ(late.error_code(), grpc::StatusCode::UNAVAILABLE) << late.error_message();

  int tokens = 1;
  bool final_seen = false;
  while (stream->Read(&msg)) {
    tokens += msg.has_chunk() ? msg.chunk().token_ids_size() : 0;
    if (msg.has_final()) {
      final_seen = true;
      EXPECT_EQ(msg.final().finish_reason(), autouvm::v1::FINISH_REASON_LENGTH);
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(final_seen);
  EXPECT_EQ(tokens, 120);
  EXPECT_EQ(d.Wait(), 0) << d.Log();
}

// Note [Shutdown signals] (server/shutdown_signals.h): a second SIGTERM or SIGINT during the drain
// ended the daemon with abseil's failure dump (exit 143 or 130) and every stream cut with "Socket
// closed". Now it ends the drain at once: each stream gets UNAVAILABLE from the daemon, the exit is 0.
TEST(LifecycleE2E, ASecondSignalEndsTheDrainAtOnceAndEveryStreamGetsItsStatus) {
  for (int second : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(second == SIGTERM ? "SIGTERM twice" : "SIGTERM, then SIGINT");
    DaemonProcess d({.config_yaml = "server: {drain_timeout: 240s}\nmodels: {tiny-llama: {max_batch: 1}}\n"});
    ASSERT_TRUE(d.Start()) << d.Log();
    ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING));
    // One stream generating in the only slot, five queued behind it: ~2.5 s of work each for the drain.
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<grpc::ClientReader<GenerateStreamResponse>>> streams;
    for (int i = 0; i < 6; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      streams.push_back(d.generation()->GenerateStream(contexts.back().get(), LongRequest(500)));
    }
    // All six in the daemon before the signal: the server starts the calls in no set order, and the one
    // read first here is not always the one generating (it was once the last, the others done by then).
    ASSERT_TRUE(Eventually([&] {
      grpc::ClientContext ctx;
      autouvm::v1::GetModelStatusRequest req;
      req.set_model("tiny-llama");
      autouvm::v1::ModelStatus status;
      return d.admin()->GetModelStatus(&ctx, req, &status).ok() && status.active_requests() == 1 &&
             status.queued_requests() == 5;
    })) << d.Log();
    GenerateStreamResponse msg;

    d.Signal(SIGTERM);
    // The daemon's own word that the drain began.
    ASSERT_TRUE(Eventually([&] { return d.Log().find("autouvmd: draining") != std::string::npos; })) << d.Log();
    const auto t0 = std::chrono::steady_clock::now();
    d.Signal(second);
    int unavailable = 0;
    for (auto& stream : streams) {
      bool final_seen = false;
      while (stream->Read(&msg)) final_seen |= msg.has_final();
      const grpc::Status s = stream->Finish();
      if (s.ok()) {
        EXPECT_TRUE(final_seen);
        continue;
      }
      ++unavailable;
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
      EXPECT_EQ(s.error_message(), "the server is shutting down");
    }
    EXPECT_GE(unavailable, 4) << d.Log();  // the five queued, the one generating at most finishing
    EXPECT_EQ(d.Wait(30), 0) << d.Log();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
    const std::string log = d.Log();
    EXPECT_NE(log.find(" during the drain"), std::string::npos) << log;
    EXPECT_NE(log.find("ending the drain now"), std::string::npos) << log;
    EXPECT_EQ(log.find("*** "), std::string::npos) << log;  // abseil's failure dump
  }
}

TEST(LifecycleE2E, ABrokenModelFailsAloneAndTheOthersServe) {
  DaemonProcess d;
  std::filesystem::create_directories(d.repository() + "/broken");
  // Everything right but n_heads, which does not divide dim.
  std::ofstream(d.repository() + "/broken/model.yaml")
      << "name: broken\nvocab_size: 320\ndim: 64\nn_layers: 1\nn_heads: 5\nn_kv_heads: 1\nffn_dim: 8\n"
         "max_seq: 16\nbos_id: 256\neos_id: 257\n";
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  grpc::ClientContext ctx;
  autouvm::v1::ListModelsResponse list;
  ASSERT_TRUE(d.admin()->ListModels(&ctx, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 2);
  for (const auto& m : list.models()) {
    if (m.name() == "broken") {
      EXPECT_EQ(m.state(), autouvm::v1::MODEL_STATE_FAILED);
      EXPECT_NE(m.error().find("n_heads"), std::string::npos) << m.error();
    } else {
      EXPECT_EQ(m.state(), autouvm::v1::MODEL_STATE_READY);
    }
  }
  GenerateRequest req = LongRequest(2);
  req.set_model("broken");
  grpc::Status s = Unary(d, req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Unary(d, LongRequest(2)).ok());
}

TEST(LifecycleE2E, KeepsItsProfileStoreInTheStateDir) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_TRUE(std::filesystem::exists(d.state_dir() + "/profiles/CURRENT"));
  EXPECT_NE(d.Log().find("profile store: rocksdb " + d.state_dir() + "/profiles"), std::string::npos) << d.Log();
}

TEST(LifecycleE2E, ACorruptProfileStoreLeavesTheDaemonServing) {
  DaemonProcess d;
  std::filesystem::create_directories(d.state_dir() + "/profiles");
  std::ofstream(d.state_dir() + "/profiles/CURRENT") << "MANIFEST-999999\n";
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_TRUE(Unary(d, LongRequest(2)).ok());
  EXPECT_NE(d.Log().find("keeping profiles in memory only"), std::string::npos) << d.Log();
  EXPECT_NE(d.Log().find("profile store: memory"), std::string::npos) << d.Log();
}

TEST(LifecycleE2E, InvalidConfigStopsStartupNamingTheKey) {
  DaemonProcess d({.config_yaml = "server:\n  drain_timeout: soon\n"});
  EXPECT_FALSE(d.Start());
  EXPECT_EQ(d.Wait(), 2);
  EXPECT_NE(d.Log().find("server.drain_timeout"), std::string::npos) << d.Log();
}

// An unknown flag or a flag's bad value is a usage error, exit 2 as a bad config is (CLI11's own codes,
// 109 and 104, were what the daemon returned).
TEST(LifecycleE2E, BadFlagsExitTwoNamingTheFlag) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"--no-such-flag", "1"},
                                                                                    {"--threads", "many"},
                                                                                    {"--drain-timeout", "30"},
                                                                                    {"--log-format", "yaml"},
                                                                                    {"--log-level", "loud"}}) {
    DaemonProcess d({.extra_args = {flag, value}});
    EXPECT_FALSE(d.Start());
    EXPECT_EQ(d.Wait(), 2) << flag << " " << value << ": " << d.Log();
    EXPECT_NE(d.Log().find(flag), std::string::npos) << d.Log();
  }
}

// A repository directory that is not there is made, and said; one with no model in it keeps the daemon
// NOT_SERVING, and both the log and GetServerStatus say which directory it looked in.
TEST(LifecycleE2E, AMissingRepositoryIsCreatedAndAnEmptyOneIsNamed) {
  DaemonProcess d({.generate_default_model = false});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(Eventually([&] { return d.Log().find("health stays NOT_SERVING") != std::string::npos; })) << d.Log();
  EXPECT_EQ(Health(d), HealthCheckResponse::NOT_SERVING);
  const std::string log = d.Log();
  EXPECT_NE(log.find("created the model repository " + d.repository()), std::string::npos) << log;
  EXPECT_NE(log.find("no model in the repository " + d.repository()), std::string::npos) << log;
  grpc::ClientContext ctx;
  autouvm::v1::ServerStatus status;
  ASSERT_TRUE(d.admin()->GetServerStatus(&ctx, {}, &status).ok());
  ASSERT_EQ(status.health_details_size(), 1) << status.DebugString();
  EXPECT_NE(status.health_details(0).find("no model in the repository " + d.repository()), std::string::npos)
      << status.health_details(0);
}

// Start-up failures after the daemon has begun (the models made, the device open; for the port file,
// the server listening and the models loading): each is said, naming what failed, and the process exits
// with 1 instead of hanging in its teardown.
TEST(LifecycleE2E, FailuresLateInStartUpExitNamingWhatFailed) {
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(held, 1), 0);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  TempDir dir;
  std::ofstream(dir.Sub("a-file")) << "not a directory";
  struct Case {
    DaemonOptions options;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{.listen = taken}, "server.listen: cannot listen on " + taken},
      {{.metrics_listen = taken}, "server.metrics_listen: cannot listen on " + taken},
      {{.port_file = dir.Sub("a-file") + "/port"}, "cannot write --port-file " + dir.Sub("a-file") + "/port"},
  };
  for (const Case& c : cases) {
    DaemonProcess d(c.options);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(d.Start()) << c.says;
    EXPECT_EQ(d.Wait(/*timeout_s=*/30), 1) << d.Log();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << c.says;
    EXPECT_NE(d.Log().find(c.says), std::string::npos) << d.Log();
  }
  close(held);
}

}  // namespace
}  // namespace autouvm::testing
