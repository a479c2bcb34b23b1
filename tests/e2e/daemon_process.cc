#include "tests/e2e/daemon_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace autouvm::testing {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

DaemonProcess::DaemonProcess(DaemonOptions options) : options_(std::move(options)) {}

DaemonProcess::~DaemonProcess() {
  if (pid_ <= 0) return;
  // A daemon that ended by itself while the test still held it crashed, or a sanitizer stopped it: its
  // report is in its stderr, in a directory about to be removed, so the test fails with it here.
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    const std::string log = Log();
    ADD_FAILURE() << "autouvmd (pid " << pid_ << ") ended by itself during the test ("
                  << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status)))
                  << "); the end of its log:\n"
                  << log.substr(log.size() > 12000 ? log.size() - 12000 : 0);
    return;
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

bool DaemonProcess::Start() {
  const std::string port_file = options_.port_file.empty() ? dir_.Sub("port") : options_.port_file;
  std::error_code ignored;
  std::filesystem::remove(port_file, ignored);  // a restart must not read the last run's port
  std::filesystem::remove(dir_.Sub("http-port"), ignored);
  // Two intra-op threads: ctest runs several daemons at once, and on a many-core host libtorch's default
  // (one thread per core each) oversubscribes the machine until tests time out.
  std::vector<std::string> argv = {AUTOUVMD_PATH,
                                   "--listen",
                                   options_.listen,
                                   "--metrics-listen",
                                   options_.metrics_listen,
                                   "--port-file",
                                   port_file,
                                   "--http-listen",
                                   options_.http_listen,
                                   "--http-port-file",
                                   dir_.Sub("http-port"),
                                   "--model-repository",
                                   repository(),
                                   "--state-dir",
                                   dir_.Sub("state"),
                                   "--threads",
                                   "2"};
  std::string yaml = options_.config_yaml;
  if (!options_.generate_default_model) yaml += "\nrepository: {generate_default_model: \"\"}\n";
  if (!yaml.empty()) {
    std::ofstream(dir_.Sub("autouvmd.yaml")) << yaml;
    argv.push_back("--config");
    argv.push_back(dir_.Sub("autouvmd.yaml"));
  }
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());
  pid_ = Spawn(argv, dir_.Sub("stdout.log"), dir_.Sub("stderr.log"));
  if (pid_ <= 0) return false;
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < until) {
    std::ifstream in(port_file);
    if (in >> port_ && port_ > 0) break;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (port_ <= 0) return false;
  http_port_ = 0;
  if (!options_.http_listen.empty()) {
    std::ifstream http_in(dir_.Sub("http-port"));
    http_in >> http_port_;  // written before the gRPC port file
  }
  channel_ =
      grpc::CreateChannel(address(), options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials());
  generation_ = autouvm::v1::Generation::NewStub(channel_);
  admin_ = autouvm::v1::Admin::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
  return true;
}

bool DaemonProcess::WaitForHealth(grpc::health::v1::HealthCheckResponse::ServingStatus want, double timeout_s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s)));
  grpc::health::v1::HealthCheckRequest req;
  auto reader = health_->Watch(&ctx, req);
  grpc::health::v1::HealthCheckResponse resp;
  while (reader->Read(&resp)) {
    if (resp.status() == want) {
      ctx.TryCancel();
      reader->Finish();
      return true;
    }
  }
  reader->Finish();
  return false;
}

void DaemonProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int DaemonProcess::Wait(double timeout_s) {
  if (pid_ > 0) exit_code_ = WaitExit(&pid_, timeout_s);
  return exit_code_;
}

std::string DaemonProcess::Log() const { return ReadFile(dir_.Sub("stderr.log")); }

autouvm::v1::GenerateRequest GreedyRequest(const std::string& model, const std::string& text, uint32_t max_tokens) {
  autouvm::v1::GenerateRequest r;
  r.set_model(model);
  r.set_text(text);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

grpc::Status CallGenerate(DaemonProcess& d, const autouvm::v1::GenerateRequest& request,
                          autouvm::v1::GenerateResponse* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  autouvm::v1::GenerateResponse ignored;
  return d.generation()->Generate(&ctx, request, response != nullptr ? response : &ignored);
}

autouvm::v1::ModelStatus ModelStatusOf(DaemonProcess& d, const std::string& model) {
  grpc::ClientContext ctx;
  autouvm::v1::GetModelStatusRequest req;
  req.set_model(model);
  autouvm::v1::ModelStatus status;
  const grpc::Status s = d.admin()->GetModelStatus(&ctx, req, &status);
  EXPECT_TRUE(s.ok()) << model << ": " << s.error_message();
  return status;
}

std::string WriteModelEntry(const std::string& repo, const ModelEntry& e) {
  std::vector<std::string> argv = {AUTOUVM_MKMODEL_PATH,
                                   "--repo",
                                   repo,
                                   "--name",
                                   e.name,
                                   "--dim",
                                   std::to_string(e.dim),
                                   "--layers",
                                   std::to_string(e.layers),
                                   "--heads",
                                   std::to_string(e.heads),
                                   "--kv-heads",
                                   std::to_string(e.kv_heads),
                                   "--ffn-dim",
                                   std::to_string(e.ffn_dim),
                                   "--max-seq",
                                   std::to_string(e.max_seq),
                                   "--seed",
                                   std::to_string(e.seed)};
  if (!e.tokenizer.empty()) argv.insert(argv.end(), {"--tokenizer", e.tokenizer});
  if (!e.chat_template) argv.push_back("--no-chat-template");
  std::string out, err;
  const int rc = RunCommand(argv, &out, &err, 120);
  return rc == 0 ? "" : "autouvm-mkmodel " + e.name + " (exit " + std::to_string(rc) + "): " + out + err;
}

}  // namespace autouvm::testing
