// DaemonProcess: runs the real autouvmd binary for a test — on 127.0.0.1 port 0, with a temporary model
// repository and state dir — and gives the test a channel, stubs and a way to signal the process.
//
//   DaemonProcess d({.config_yaml = "models: {tiny-llama: {max_batch: 2}}"});
//   ASSERT_TRUE(d.Start()) << d.Log();
//   ASSERT_TRUE(d.WaitForHealth(grpc::health::v1::HealthCheckResponse::SERVING));
//
// Not thread-safe, except the stubs, which gRPC makes safe to share.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "autouvm/v1/admin.grpc.pb.h"
#include "autouvm/v1/generation.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {

class DaemonProcess;

struct DaemonOptions {
  std::string config_yaml;  // written to a file and passed with --config ("" → embedded default)
  std::vector<std::string> extra_args;
  bool generate_default_model = true;  // false: the test fills repository() itself before Start
  // The channel's credentials (a daemon with server.tls); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The addresses and port file it is started with (a start-up failure's test); "" port_file: one in
  // the test's temporary directory.
  std::string listen = "127.0.0.1:0";
  std::string metrics_listen = "127.0.0.1:0";  // several daemons at once: on a free port too
  std::string http_listen = "127.0.0.1:0";     // the OpenAI API's; "" turns it off
  std::string port_file;
};

// Greedy decoding of `max_tokens` tokens after `text`, EOS ignored (so exactly that many come back).
autouvm::v1::GenerateRequest GreedyRequest(const std::string& model, const std::string& text, uint32_t max_tokens);
// Generate (unary) with a 60 s deadline; `response` may be null.
grpc::Status CallGenerate(DaemonProcess& d, const autouvm::v1::GenerateRequest& request,
                          autouvm::v1::GenerateResponse* response = nullptr);
// Admin.GetModelStatus of `model`; a test failure (and an empty status) if the call fails.
autouvm::v1::ModelStatus ModelStatusOf(DaemonProcess& d, const std::string& model = "tiny-llama");

// A small model entry for a test's repository, written by autouvm-mkmodel before the daemon starts.
struct ModelEntry {
  std::string name;
  int dim = 64;
  int layers = 1;
  int heads = 4;
  int kv_heads = 2;
  int ffn_dim = 96;
  int max_seq = 64;
  int seed = 3;
  std::string tokenizer;      // "": mkmodel's default
  bool chat_template = true;  // false: --no-chat-template
};
// "" when the entry was written; else what autouvm-mkmodel printed.
std::string WriteModelEntry(const std::string& repo, const ModelEntry& entry);

class DaemonProcess {
 public:
  explicit DaemonProcess(DaemonOptions options = {});
  // SIGKILL if still running; a test failure if it ended by itself (crashed) and Wait never saw it.
  ~DaemonProcess();

  // Spawns autouvmd and waits (up to 60 s) for it to report its port. False if it died or timed out.
  // May be called again after the process exited (a restart on the same repository and state dir).
  bool Start();
  // Watches grpc.health.v1 until the overall status is `want` (up to `timeout_s`).
  bool WaitForHealth(grpc::health::v1::HealthCheckResponse::ServingStatus want, double timeout_s = 60);
  void Signal(int sig);
  // Waits for the process to exit (or takes the exit seen by Start); returns its exit code, or -1 on
  // timeout or death by a signal.
  int Wait(double timeout_s = 60);

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int http_port() const { return http_port_; }  // 0 when the OpenAI API is off
  pid_t pid() const { return pid_; }            // -1 when not running
  std::string repository() const { return dir_.Sub("models"); }
  std::string state_dir() const { return dir_.Sub("state"); }
  std::string Log() const;  // the daemon's stderr so far
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  autouvm::v1::Generation::Stub* generation() const { return generation_.get(); }
  autouvm::v1::Admin::Stub* admin() const { return admin_.get(); }
  grpc::health::v1::Health::Stub* health() const { return health_.get(); }

 private:
  DaemonOptions options_;
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int http_port_ = 0;
  int exit_code_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<autouvm::v1::Generation::Stub> generation_;
  std::unique_ptr<autouvm::v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace autouvm::testing
