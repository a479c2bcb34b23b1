#include "bench/daemon_client.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"

namespace autouvm::bench {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

namespace {

using Clock = std::chrono::steady_clock;

// dir/autouvmd.yaml with these mappings; the path.
std::string WriteDaemonConfig(const std::string& dir, const std::string& repository, const std::string& runtime,
                              const std::string& models_yaml) {
  const std::string path = dir + "/autouvmd.yaml";
  std::ofstream f(path);
  f << "server: {listen: 127.0.0.1:0, metrics_listen: \"\", http_listen: \"\"}\n"
    << "repository: " << repository << "\n"
    << "state_dir: " << dir << "/state\n"
    << "runtime: " << runtime << "\n"
    << models_yaml << "\n";
  if (!f) Die("cannot write " + path);
  return path;
}

}  // namespace

std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

DaemonUnderTest StartDaemon(const std::string& binary, const std::string& config_path, const std::string& dir,
                            const std::vector<std::string>& extra_args) {
  DaemonUnderTest d;
  const std::string port_file = dir + "/port";
  d.log = dir + "/daemon.log";
  std::vector<std::string> argv = {binary, "--config", config_path, "--port-file", port_file};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  d.pid = Spawn(argv, d.log);
  if (d.pid < 0) Die("cannot start " + binary);
  std::string port;
  for (int i = 0; i < 600 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    port = ReadWholeFile(port_file);
  }
  if (port.empty()) Die("the daemon did not start: " + ReadWholeFile(d.log));
  d.channel = grpc::CreateChannel("127.0.0.1:" + port, grpc::InsecureChannelCredentials());
  d.generation = autouvm::v1::Generation::NewStub(d.channel);
  d.admin = autouvm::v1::Admin::NewStub(d.channel);
  return d;
}

autouvm::v1::ModelStatus ModelStatusOf(autouvm::v1::Admin::Stub* admin, const std::string& model) {
  autouvm::v1::GetModelStatusRequest req;
  req.set_model(model);
  autouvm::v1::ModelStatus st;
  grpc::ClientContext ctx;
  if (!admin->GetModelStatus(&ctx, req, &st).ok()) st.Clear();
  return st;
}

void WaitModelReady(const DaemonUnderTest& d, const std::string& model) {
  for (int i = 0; i < 600; ++i) {
    const autouvm::v1::ModelStatus st = ModelStatusOf(d.admin.get(), model);
    if (st.state() == autouvm::v1::MODEL_STATE_READY) return;
    if (st.state() == autouvm::v1::MODEL_STATE_FAILED) Die("the daemon failed to load " + model + ": " + st.error());
    if (waitpid(d.pid, nullptr, WNOHANG) == d.pid) Die("the daemon exited: " + ReadWholeFile(d.log));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  Die("model " + model + " did not load within 2 minutes");
}

bool DecodeReady(autouvm::v1::Admin::Stub* admin, const std::string& model) {
  autouvm::v1::GetProfileRequest req;
  req.set_model(model);
  req.mutable_shape()->set_phase(autouvm::v1::PHASE_DECODE);
  req.mutable_shape()->set_batch(1);
  autouvm::v1::GetProfileResponse resp;
  grpc::ClientContext ctx;
  return admin->GetProfile(&ctx, req, &resp).ok() && resp.summary().state() == autouvm::v1::PROFILE_STATE_READY;
}

bool WaitDecodeReady(autouvm::v1::Admin::Stub* admin, const std::string& model, absl::Duration timeout) {
  for (int i = 0; i < timeout / absl::Milliseconds(100); ++i) {
    if (DecodeReady(admin, model)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DecodeReady(admin, model);
}

std::string WriteCpuDaemonConfig(const std::string& dir, const std::string& default_model,
                                 const std::string& models_yaml) {
  return WriteDaemonConfig(dir, absl::StrCat("{path: ", dir, "/models, generate_default_model: ", default_model, "}"),
                           "{backend: cpu}", models_yaml);
}

std::string WriteCudaDaemonConfig(const std::string& dir, const std::string& repo, const std::string& gpu,
                                  const std::string& models_yaml, const std::string& runtime_extra) {
  return WriteDaemonConfig(
      dir, absl::StrCat("{path: ", repo, ", generate_default_model: \"\"}"),
      absl::StrCat("{backend: cuda, gpu: ", gpu, runtime_extra.empty() ? "" : ", ", runtime_extra, "}"), models_yaml);
}

std::vector<int32_t> BenchPrompt(int len, int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < len; ++i) prompt.push_back(static_cast<int32_t>(1 + (int64_t{i} * 7919) % (vocab - 1)));
  return prompt;
}

DaemonRun GenerateThroughDaemon(autouvm::v1::Generation::Stub* stub, const std::string& model,
                                const std::vector<int32_t>& prompt, int tokens, int logprobs) {
  autouvm::v1::GenerateRequest req;
  if (logprobs >= 0) req.set_logprobs(static_cast<uint32_t>(logprobs));
  req.set_model(model);
  for (int32_t t : prompt) req.mutable_token_ids()->add_ids(t);
  req.set_add_bos(false);
  req.set_max_tokens(static_cast<uint32_t>(tokens));
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  const auto start = Clock::now();
  auto reader = stub->GenerateStream(&ctx, req);
  autouvm::v1::GenerateStreamResponse resp;
  DaemonRun r;
  Clock::time_point first, last;
  while (reader->Read(&resp)) {
    if (!resp.has_chunk()) continue;
    for (int32_t id : resp.chunk().token_ids()) {
      const Clock::time_point now = Clock::now();
      if (!r.tokens.empty()) r.gaps_ms.push_back(1e3 * std::chrono::duration<double>(now - last).count());
      last = now;
      if (r.tokens.empty()) {
        first = last;
        r.ttft_ms = 1e3 * std::chrono::duration<double>(first - start).count();
      }
      r.tokens.push_back(id);
    }
    for (const autouvm::v1::TokenLogprobs& lp : resp.chunk().logprobs()) {
      r.logprobs.push_back(lp.logprob());
      for (const autouvm::v1::TokenLogprob& t : lp.top()) {
        r.logprobs.push_back(static_cast<float>(t.token_id()));
        r.logprobs.push_back(t.logprob());
      }
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) Die(absl::StrCat("GenerateStream: ", s.error_message()));
  if (static_cast<int>(r.tokens.size()) != tokens) Die(absl::StrCat("the daemon generated ", r.tokens.size()));
  r.decode_tokens_per_s = (tokens - 1) / std::chrono::duration<double>(last - first).count();
  r.first_token = first;
  r.last_token = last;
  return r;
}

int StopDaemon(DaemonUnderTest* d) {
  if (d->pid <= 0) return -1;
  kill(d->pid, SIGTERM);
  int wstatus = 0;
  const int code = waitpid(d->pid, &wstatus, 0) == d->pid && WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  d->pid = -1;
  return code;
}

}  // namespace autouvm::bench
