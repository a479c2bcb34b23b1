// daemon_overhead (GPU host): what serving through the daemon costs against the bare engine loop, on the
// same model, budget and policy. Both sides use the daemon's own engine — ModelRunner on the CUDA
// ComputeDevice (weights generated on the GPU, in managed memory), the ModelSession recording each shape
// once and then following its plan through a ModelExecution over the CUDA backend:
//
// - bare: in this process, a prefill and `--tokens` decode steps of batch 1, each iteration wrapped in
//   the profiler's hooks, the next token the argmax of the logits; decode tokens/s over the timed steps.
// - daemon: autouvmd (runtime.backend cuda) on a repository holding the same model entry, driven over
//   gRPC by GenerateStream with the same prompt (token ids), greedy, ignore_eos; decode tokens/s from
//   the arrival times of the streamed tokens after the first, measured here, the client.
//
// Each side first serves one untimed request (profiling its shapes; the bare side drains the profiler's
// jobs, the daemon is polled until its decode profile is ready), then --repeats timed ones; the table
// gives each repeat and the medians. The tokens of the two sides must be equal.
//
//   source .gpu/env.sh; build-gpu/bench/daemon_overhead --preset 7b --factor 1.5 --tokens 64
//
// Budget: the model's named bytes (weights, rope tables, KV cache) / factor, configured as the model's
// device_budget on both sides (the planner sets its activations' room aside from it).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "autouvm/v1/admin.grpc.pb.h"
#include "autouvm/v1/generation.grpc.pb.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/decode_harness.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "profiler/model_execution.h"
#include "profiler/model_session.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_key.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "runtime/compute_device.h"

namespace {

using Clock = std::chrono::steady_clock;
using autouvm::profiler::IterationPhase;

using autouvm::bench::Check;
using autouvm::bench::DaemonRun;
using autouvm::bench::Die;
using autouvm::bench::GenerateThroughDaemon;
using autouvm::bench::Median;

int32_t Argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

struct Run {
  std::vector<int32_t> tokens;
  double decode_tokens_per_s = 0;
  double ttft_ms = 0;  // from the request to its first token (bare: the prefill and its hooks)
  // Bare only: what the prefill and the decode steps moved (CUPTI, through the CUDA backend).
  autouvm::runtime::UvmCounters prefill_moved, decode_moved;
};

// The bare loop: the daemon's engine without the daemon.
class Bare {
 public:
  Bare(autouvm::runtime::ComputeDevice* device, const std::string& entry_dir,
       const autouvm::engine::ModelConfig& config) {
    autouvm::runtime::Observer::MakeExecutionRepeatable();
    runner_ = Check(autouvm::engine::ModelRunner::Create(entry_dir, config, 1, device), "loading the model");
    store_ = autouvm::profiler::NewInMemoryProfileStore();
    repository_ = std::make_unique<autouvm::profiler::ProfileRepository>(store_.get());
    const auto spec = device->backend()->spec();
    jobs_ = std::make_unique<autouvm::profiler::ProfileJobs>(repository_.get(), spec, &clock_);
    // As the daemon runs it by default (runtime.monitor_every).
    owned_execution_ = autouvm::profiler::ModelExecution::OnDevice(device->backend(), runner_->NamedTensors(), {},
                                                                   runner_->NewTensorBinding());
    execution_ = owned_execution_.get();
    backend_ = device->backend();
  }

  // Before the first Generate: the profile keys' model and budget.
  void Profile(const std::string& digest, const std::string& gpu, int64_t budget) {
    // The daemon's wiring of a model's AutoUVM loop: the same ModelSession, its own observer.
    profiler_ = Check(autouvm::profiler::ModelSession::Create({digest, gpu, budget, "autouvm"}, jobs_.get(),
                                                              runner_->NamedTensors(), std::move(owned_execution_)),
                      "the model's session");
  }

  int64_t named_bytes() const {
    int64_t n = 0;
    for (const auto& t : runner_->NamedTensors()) n += t.bytes;
    return n;
  }

  // The backend's counters once its work is done.
  autouvm::runtime::UvmCounters Counters() {
    Check(backend_->Synchronize(), "synchronize");
    return Check(backend_->ReadCounters(), "CUPTI counters");
  }

  Run Generate(const std::vector<int32_t>& prompt, int tokens) {
    Run r;
    const int64_t vocab = runner_->config().vocab_size;
    const autouvm::runtime::UvmCounters before = Counters();
    const auto start = Clock::now();
    profiler_->BeforeIteration(IterationPhase::kPrefill, 1, static_cast<int64_t>(prompt.size()));
    auto logits = runner_->Prefill(0, prompt, 0);
    Check(logits.status(), "prefill");
    if (profiler_->AfterIteration(logits.status())) Die("a followed prefill had to be re-run");
    r.tokens.push_back(Argmax(logits->data(), vocab));
    r.ttft_ms = 1e3 * std::chrono::duration<double>(Clock::now() - start).count();
    const autouvm::runtime::UvmCounters after_prefill = Counters();
    r.prefill_moved = after_prefill - before;
    std::vector<float> out;
    const auto t0 = Clock::now();
    for (int i = 1; i < tokens; ++i) {
      const autouvm::engine::ModelRunner::DecodeRow row{0, r.tokens.back(),
                                                        static_cast<int64_t>(prompt.size()) + i - 1};
      profiler_->BeforeIteration(IterationPhase::kDecode, 1, 0);
      absl::Status s = runner_->Decode({&row, 1}, &out);
      Check(s, "decode");
      if (profiler_->AfterIteration(s)) Die("a followed decode step had to be re-run");
      r.tokens.push_back(Argmax(out.data(), vocab));
    }
    r.decode_tokens_per_s = (tokens - 1) / std::chrono::duration<double>(Clock::now() - t0).count();
    r.decode_moved = Counters() - after_prefill;
    return r;
  }

  void Drain() { jobs_->Drain(); }
  autouvm::profiler::ExecutionStats stats() const { return execution_->stats(); }

 private:
  autouvm::base::RealClock clock_;
  autouvm::runtime::DeviceBackend* backend_ = nullptr;
  std::unique_ptr<autouvm::engine::ModelRunner> runner_;
  std::unique_ptr<autouvm::profiler::ProfileStore> store_;
  std::unique_ptr<autouvm::profiler::ProfileRepository> repository_;
  std::unique_ptr<autouvm::profiler::ProfileJobs> jobs_;
  std::unique_ptr<autouvm::profiler::ModelExecution> owned_execution_;  // until Profile hands it on
  autouvm::profiler::ModelExecution* execution_ = nullptr;
  std::unique_ptr<autouvm::profiler::ModelSession> profiler_;
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "daemon_overhead";
  CLI::App app{"daemon_overhead: tokens/s through the daemon against the bare engine loop (GPU host)"};
  std::string preset = "7b";
  double factor = 1.5;
  int tokens = 64, prompt_len = 16, repeats = 3;
  std::string daemon_path = AUTOUVMD_PATH;
  app.add_option("--preset", preset, "7b, 13b or small");
  app.add_option("--factor", factor, "oversubscription: named bytes / device budget");
  app.add_option("--tokens", tokens, "tokens generated per request (the first by the prefill)");
  app.add_option("--prompt", prompt_len, "prompt tokens");
  app.add_option("--repeats", repeats, "timed requests per side");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  CLI11_PARSE(app, argc, argv);

  // The model entry both sides load: weights generated on the GPU from the entry's seed.
  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/daemon-overhead-", getpid());
  const std::string repo = root + "/models";
  autouvm::engine::ModelConfig c = Check(autouvm::bench::LlamaConfig(preset, 7, prompt_len + tokens + 8), "config");
  c.name = "bench-" + preset;
  Check(autouvm::engine::WriteLlamaModel(c, 7, repo), "writing the model entry");
  const std::string entry = repo + "/" + c.name;
  const std::string digest = Check(autouvm::profiler::ModelDigest(entry), "digest");
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);

  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  std::vector<Run> bare_runs;
  int64_t budget = 0, named = 0;
  autouvm::profiler::ExecutionStats bare_stats;
  {
    auto device = Check(autouvm::runtime::OpenComputeDevice({.backend = "cuda", .spec = spec}), "CUDA");
    Bare bare(device.get(), entry, c);
    named = bare.named_bytes();
    budget = static_cast<int64_t>(static_cast<double>(named) / factor);
    bare.Profile(digest, spec.name, budget);
    bare.Generate(prompt, tokens);  // profiles the prefill and the first decode step
    bare.Drain();
    bare.Generate(prompt, tokens);  // checks nothing, follows: warm
    for (int i = 0; i < repeats; ++i) bare_runs.push_back(bare.Generate(prompt, tokens));
    bare_stats = bare.stats();
  }
  std::printf("model %s: %.2f GiB named, budget %.2f GiB (factor %.2f), %d prompt tokens, %d generated\n",
              c.name.c_str(), named / double(1 << 30), budget / double(1 << 30), factor, prompt_len, tokens);
  std::printf(
      "bare: %lld iterations followed, %lld abandoned, %lld plan switches; monitor: %lld sampled, %lld ops "
      "reclassified, %.1f MiB re-pinned\n",
      (long long)bare_stats.followed_iterations, (long long)bare_stats.abandoned_iterations,
      (long long)bare_stats.plan_switches, (long long)bare_stats.sampled_iterations,
      (long long)bare_stats.reclassified_ops, bare_stats.repinned_bytes / double(1 << 20));

  // The daemon on the same entry and budget.
  const std::string config_path = autouvm::bench::WriteCudaDaemonConfig(
      root, repo, spec.name,
      absl::StrCat("models: {", c.name, ": {max_batch: 1, policy: autouvm, device_budget: ", budget, "}}"));
  autouvm::bench::DaemonUnderTest daemon = autouvm::bench::StartDaemon(daemon_path, config_path, root);
  autouvm::v1::Generation::Stub* gen = daemon.generation.get();
  autouvm::v1::Admin::Stub* admin = daemon.admin.get();
  // Loading: health SERVING once the model is in; GenerateStream says UNAVAILABLE until then.
  autouvm::bench::WaitModelReady(daemon, c.name);
  std::vector<DaemonRun> daemon_runs;
  GenerateThroughDaemon(gen, c.name, prompt, tokens);  // profiles
  autouvm::bench::WaitDecodeReady(admin, c.name, absl::Seconds(30));
  GenerateThroughDaemon(gen, c.name, prompt, tokens);  // warm
  for (int i = 0; i < repeats; ++i) daemon_runs.push_back(GenerateThroughDaemon(gen, c.name, prompt, tokens));
  const autouvm::v1::ModelStatus status = autouvm::bench::ModelStatusOf(admin, c.name);
  if (status.name().empty()) Die("GetModelStatus failed");
  const int code = autouvm::bench::StopDaemon(&daemon);

  const autouvm::v1::ExecutionStatus& x = status.execution();
  std::printf(
      "daemon: %llu iterations followed, %llu abandoned, %llu plan switches, backend %s (exit %d)%s%s; monitor: "
      "%llu sampled, %llu ops reclassified, %.1f MiB re-pinned; CUPTI: %lld fault groups, %.2f GiB host->device, "
      "%.2f GiB device->host; executor: %.2f GiB prefetched, %.2f GiB evicted\n",
      (unsigned long long)x.followed_iterations(), (unsigned long long)x.abandoned_iterations(),
      (unsigned long long)x.plan_switches(), x.backend().c_str(), code,
      x.last_error().empty() ? "" : "; last error: ", x.last_error().c_str(),
      (unsigned long long)x.sampled_iterations(), (unsigned long long)x.reclassified_ops(),
      x.repinned_bytes() / double(1 << 20), (long long)x.gpu_fault_groups(), x.h2d_bytes() / double(1 << 30),
      x.d2h_bytes() / double(1 << 30), x.prefetched_bytes() / double(1 << 30), x.evicted_bytes() / double(1 << 30));
  std::printf(
      "\n| repeat | bare decode tok/s | daemon decode tok/s | daemon / bare | bare TTFT ms | daemon TTFT ms |\n"
      "|---|---|---|---|---|---|\n");
  std::vector<double> b, d, bt, dt;
  bool same = true;
  for (int i = 0; i < repeats; ++i) {
    b.push_back(bare_runs[i].decode_tokens_per_s);
    d.push_back(daemon_runs[i].decode_tokens_per_s);
    same &= bare_runs[i].tokens == daemon_runs[i].tokens;
    bt.push_back(bare_runs[i].ttft_ms);
    dt.push_back(daemon_runs[i].ttft_ms);
    std::printf("| %d | %.2f | %.2f | %.3f | %.1f | %.1f |\n", i + 1, b.back(), d.back(), d.back() / b.back(),
                bt.back(), dt.back());
  }
  std::printf("| median | %.2f | %.2f | %.3f | %.1f | %.1f |\n", Median(b), Median(d), Median(d) / Median(b),
              Median(bt), Median(dt));
  std::printf("\ntokens equal on both sides: %s\n", same ? "yes" : "NO");
  std::printf("bare, what each timed request moved (CUPTI):\n");
  for (int i = 0; i < repeats; ++i) {
    const Run& r = bare_runs[i];
    const double steps = tokens - 1;
    std::printf(
        "  %d: prefill %lld fault groups, %.1f MiB h2d, %.1f MiB d2h; decode per step %.1f fault groups, %.1f MiB "
        "h2d, %.1f MiB d2h\n",
        i + 1, (long long)r.prefill_moved.gpu_fault_groups, r.prefill_moved.h2d_total() / double(1 << 20),
        r.prefill_moved.d2h_total() / double(1 << 20), r.decode_moved.gpu_fault_groups / steps,
        r.decode_moved.h2d_total() / double(1 << 20) / steps, r.decode_moved.d2h_total() / double(1 << 20) / steps);
  }
  std::filesystem::remove_all(root);
  return same ? 0 : 1;
}
