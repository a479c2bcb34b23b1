// What the daemon benchmarks share: starting autouvmd on a config file and waiting for its models, and
// generating through it as a client does (gRPC streaming), timed.
//
//   DaemonUnderTest d = StartDaemon(AUTOUVMD_PATH, config_path, dir);   // Die()s if it does not start
//   WaitModelReady(d, "bench-7b");
//   DaemonRun r = GenerateThroughDaemon(d.generation.get(), "bench-7b", prompt, 64);
//   StopDaemon(&d);                                                        // SIGTERM; its exit code
//
// Not thread-safe but for the stubs, which gRPC makes safe to share.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "autouvm/v1/admin.grpc.pb.h"
#include "autouvm/v1/generation.grpc.pb.h"

namespace autouvm::bench {

struct DaemonUnderTest {
  pid_t pid = -1;
  std::string log;  // its stderr and stdout
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<autouvm::v1::Generation::Stub> generation;
  std::unique_ptr<autouvm::v1::Admin::Stub> admin;
};

struct DaemonRun {
  std::vector<int32_t> tokens;
  double decode_tokens_per_s = 0;
  double ttft_ms = 0;
  std::vector<double> gaps_ms;  // between consecutive tokens (the steps the request was in)
  std::chrono::steady_clock::time_point first_token, last_token;  // when they arrived
  // With `logprobs` asked for: per token, its logprob, then each alternative's id and logprob (as floats).
  std::vector<float> logprobs;
};

std::string ReadWholeFile(const std::string& path);
// Starts `argv` (argv[0] a path) with stdout and stderr into `log`; the pid, or -1.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log);
// Starts `binary --config config_path --port-file dir/port [extra_args]`, its output in dir/daemon.log,
// and waits (up to 60 s) for its port.
DaemonUnderTest StartDaemon(const std::string& binary, const std::string& config_path, const std::string& dir,
                            const std::vector<std::string>& extra_args = {});
// Waits (up to 2 minutes) until `model` is READY; Die()s if it failed or the daemon exited.
void WaitModelReady(const DaemonUnderTest& d, const std::string& model);
// Whether the model's batch-1 decode profile is ready (its plan can be followed).
bool DecodeReady(autouvm::v1::Admin::Stub* admin, const std::string& model);
// Polls DecodeReady every 100 ms for up to `timeout`; whether it became ready.
bool WaitDecodeReady(autouvm::v1::Admin::Stub* admin, const std::string& model, absl::Duration timeout);
// The daemon configs the benches write, as dir/autouvmd.yaml (the path): gRPC on a free port (StartDaemon
// reads it), no metrics port and no HTTP API (--http-listen turns it on), state under dir/state, and
// `models_yaml` as the last line (a `models:` or `model_defaults:` mapping).
// On the CPU backend, serving the tiny model the daemon generates on first start (`default_model`, in
// the repository dir/models).
std::string WriteCpuDaemonConfig(const std::string& dir, const std::string& default_model,
                                 const std::string& models_yaml);
// On CUDA with `gpu`'s spec, serving `repo` (no default model); `runtime_extra` adds keys to the
// runtime mapping ("compress_streamed: true").
std::string WriteCudaDaemonConfig(const std::string& dir, const std::string& repo, const std::string& gpu,
                                  const std::string& models_yaml, const std::string& runtime_extra = "");
// The benches' prompt: `len` token ids spread over a vocabulary of `vocab` (at least 2), no bos.
std::vector<int32_t> BenchPrompt(int len, int64_t vocab = 32000);
autouvm::v1::ModelStatus ModelStatusOf(autouvm::v1::Admin::Stub* admin, const std::string& model);
// Greedy, EOS ignored, `tokens` tokens after `prompt` (token ids, no bos added); with `logprobs` >= 0, each
// token's logprob and that many alternatives (DaemonRun::logprobs).
DaemonRun GenerateThroughDaemon(autouvm::v1::Generation::Stub* stub, const std::string& model,
                                const std::vector<int32_t>& prompt, int tokens, int logprobs = -1);
// SIGTERM, then waits; the exit code (-1 if it died by a signal).
int StopDaemon(DaemonUnderTest* d);

}  // namespace autouvm::bench
