// arrivals (GPU host): requests that arrive together, through the daemon and its gRPC API. Under a budget
// every forward pass streams the model's non-resident weights once (ARCHITECTURE.md "The one rule"), so a
// burst of B requests pays one sweep per prefill pass before its last first token. This runs the same
// bursts against daemons that differ only in models.<name>.max_prefill_tokens: 1 (every prompt a pass of
// its own, as before prefills were batched) and the default (the burst's prompts share their passes).
//
//   build-gpu/bench/arrivals --preset 7b --factor 2.0 --streams 16 --tokens 128 --prefill-tokens 1,2048
//
// For each setting: one stream alone first (its decode step is the sweep: ms per token at batch 1), then
// --warmups bursts (their new shapes are profiled), then --repeats timed bursts of --streams requests
// started at once by as many client threads: TTFT p50 and max (ms and in sweeps), the aggregate decode
// rate (tokens after the first / the burst's wall time from the first first token to the last token)
// against the ideal streams / sweep, the passes the burst took (ModelStatus deltas), and what the
// executor moved; the burst's wall time per pass.
//
//   build-gpu/bench/arrivals --preset 7b --factor 2.0 --streams 64 --ramp-ms 150 --prefill-tokens 2048
//       # the batch grows 1 → 64, one request per 150 ms: the longest gap between two tokens of any
//       # request against the full batch's step (every new batch bucket's first passes included)
//   build-gpu/bench/arrivals --preset mistral7b --factor 2.0 --streams 64 --prompt 128 --tokens 128 \
//       --prefill-tokens 2048 --budget-of-weights                     # a large batch, its KV cache in the budget
//   build-gpu/bench/arrivals --preset 7b --factor 1.0 --streams 16 --prompt 2048 --tokens 64 --ramp-ms 300 \
//       --prefill-tokens 2048 --settings 'size_steps: false'   # long prompts joining running requests: their
//       # inter-token gaps (p50 / p90 / p99 / max per burst), with and without Note [Steps sized by their cost]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/decode_harness.h"
#include "bench/sized_entry.h"
#include "runtime/gpu_spec.h"

namespace {

using autouvm::bench::Check;
using autouvm::bench::DaemonRun;
using autouvm::bench::Die;
using autouvm::bench::Max;
using autouvm::bench::Median;
using Clock = std::chrono::steady_clock;

struct Burst {
  std::vector<DaemonRun> runs;
  std::vector<Clock::time_point> started, ended;
  autouvm::v1::ModelStatus before, after;
};

// `streams` requests, each with its own prompt (the bench prompt with its first id varied): at once, or
// the i-th ramp_ms × i after the first (a batch growing one request at a time).
Burst RunBurst(autouvm::bench::DaemonUnderTest& d, const std::string& model, int streams, int prompt_len, int tokens,
               int ramp_ms) {
  Burst b;
  b.runs.resize(static_cast<size_t>(streams));
  b.started.resize(static_cast<size_t>(streams));
  b.ended.resize(static_cast<size_t>(streams));
  b.before = autouvm::bench::ModelStatusOf(d.admin.get(), model);
  std::barrier go(streams);
  std::vector<std::thread> clients;
  for (int i = 0; i < streams; ++i) {
    clients.emplace_back([&, i] {
      std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);
      prompt[0] = 1 + i;
      go.arrive_and_wait();
      if (ramp_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(int64_t{ramp_ms} * i));
      b.started[static_cast<size_t>(i)] = Clock::now();
      b.runs[static_cast<size_t>(i)] = autouvm::bench::GenerateThroughDaemon(d.generation.get(), model, prompt, tokens);
      b.ended[static_cast<size_t>(i)] = Clock::now();
    });
  }
  for (std::thread& t : clients) t.join();
  b.after = autouvm::bench::ModelStatusOf(d.admin.get(), model);
  return b;
}

// The model's device residency as its executor accounts it (ModelStatus.execution.resident_bytes),
// sampled every 100 ms from the daemon's start until Stop(): the most seen and the plan that held it.
class ResidencySampler {
 public:
  ResidencySampler(autouvm::v1::Admin::Stub* admin, std::string model)
      : thread_([this, admin, model = std::move(model)] {
          while (!stop_.load()) {
            const autouvm::v1::ModelStatus st = autouvm::bench::ModelStatusOf(admin, model);
            {
              std::lock_guard<std::mutex> lock(mu_);
              ++samples_;
              if (st.execution().resident_bytes() > max_) {
                max_ = st.execution().resident_bytes();
                key_ = st.execution().following();
              }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          }
        }) {}
  ~ResidencySampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::string Describe(int64_t budget) {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrFormat("%d samples, the most %.2f GiB = %.3f of the budget, under %s", samples_,
                           max_ / double(1 << 30), max_ / static_cast<double>(budget), key_.empty() ? "-" : key_);
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  int64_t samples_ = 0, max_ = 0;
  std::string key_;
  std::thread thread_;  // last: it reads the members above
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "arrivals";
  CLI::App app{"arrivals: bursts of requests through the daemon under a budget (GPU host)"};
  std::string preset = "7b", prefill_tokens_list = "1,2048";
  double factor = 2.0;
  int streams = 16, tokens = 128, prompt_len = 16, warmups = 1, repeats = 2, ramp_ms = 0;
  std::string daemon_path = AUTOUVMD_PATH;
  bool budget_of_weights = false;
  app.add_option("--preset", preset, "7b, mistral7b, 13b or small");
  app.add_option("--factor", factor, "oversubscription: the model's named bytes / its device budget");
  app.add_flag("--budget-of-weights", budget_of_weights,
               "the budget is the weights' bytes / factor (the batch's KV cache competes for it); otherwise the "
               "named bytes' (weights and the KV cache of --streams whole requests)");
  app.add_option("--streams", streams, "requests per burst")->check(CLI::Range(1, 256));
  app.add_option("--tokens", tokens, "tokens generated per request")->check(CLI::Range(2, 4096));
  app.add_option("--prompt", prompt_len, "prompt tokens")->check(CLI::Range(2, 4096));
  app.add_option("--ramp-ms", ramp_ms,
                 "start the burst's requests this many ms apart (0: at once): the batch grows one request at a time")
      ->check(CLI::Range(0, 60000));
  app.add_option("--warmups", warmups, "untimed bursts first (their new shapes are profiled)");
  app.add_option("--repeats", repeats, "timed bursts");
  app.add_option("--prefill-tokens", prefill_tokens_list, "max_prefill_tokens of each daemon, comma-separated");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  bool plan_at_load = false;
  app.add_flag("--plan-at-load", plan_at_load,
               "models.<name>.plan_at_load: every phase planned before serving (without it, set false)");
  std::string settings;
  app.add_option("--settings", settings,
                 "more model settings for every daemon, as YAML flow-map entries (e.g. 'size_steps: false')");
  std::string log_dir;
  app.add_option("--log-dir", log_dir,
                 "keep each daemon's log there (daemon-<max_prefill_tokens>.log), at debug level: a line per pass");
  CLI11_PARSE(app, argc, argv);

  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/arrivals-", getpid());
  const std::string repo = root + "/models";
  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  autouvm::engine::ModelConfig c = Check(autouvm::bench::LlamaConfig(preset, 7, prompt_len + tokens + 8), "config");
  c.name = absl::StrCat("bench-", preset);
  // The model entry written and its named bytes taken from the model as the daemon loads it (its KV cache
  // for a burst).
  const autouvm::bench::EntrySize size = autouvm::bench::WriteSizedEntry(c, repo, streams, spec);
  const int64_t named = size.named_bytes, weights = size.weight_bytes;
  const int64_t budget = static_cast<int64_t>(static_cast<double>(budget_of_weights ? weights : named) / factor);
  std::printf(
      "%s preset, %.2f GiB named (%.2f GiB of weights), budget %.2f GiB (factor %.2f of the %s); bursts of %d "
      "requests started %s, %d prompt tokens, %d generated; %d untimed and %d timed bursts per daemon\n\n",
      preset.c_str(), named / double(1 << 30), weights / double(1 << 30), budget / double(1 << 30), factor,
      budget_of_weights ? "weights" : "named bytes", streams,
      ramp_ms > 0 ? absl::StrCat(ramp_ms, " ms apart").c_str() : "at once", prompt_len, tokens, warmups, repeats);
  if (!settings.empty()) std::printf("model settings: %s\n\n", settings.c_str());
  std::printf(
      "| max_prefill_tokens | burst | sweep ms | TTFT p50 ms | TTFT max ms | TTFT p50 / max, sweeps | aggregate tok/s "
      "| "
      "ideal tok/s (streams / sweep) | aggregate / ideal | prefill passes | mixed passes | decode steps | fault groups "
      "| "
      "ms per pass | passes by plan: own / nearest / none | longest gap ms | steady step ms | longest / steady | "
      "executor's peak resident / budget | weights read in place for KV rows, GiB | daemon exit |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (const std::string& setting : std::vector<std::string>(absl::StrSplit(prefill_tokens_list, ','))) {
    const std::string dir = absl::StrCat(root, "/daemon-", setting);
    std::filesystem::create_directories(dir);
    const std::string config_path = autouvm::bench::WriteCudaDaemonConfig(
        dir, repo, spec.name,
        absl::StrCat("model_defaults: {max_batch: ", std::max(streams, 1), ", max_queue: ", std::max(streams, 64),
                     ", policy: autouvm, device_budget: ", budget, ", max_prefill_tokens: ", setting,
                     ", plan_at_load: ", plan_at_load ? "true" : "false", settings.empty() ? "" : ", ", settings, "}"));
    // Wall-clock marks on stderr, to line device-memory samples up with (nvidia-smi's timestamps).
    auto mark = [](const char* what) {
      const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::fprintf(stderr, "arrivals: %.3f %s\n", now, what);
    };
    mark("daemon starting");
    autouvm::bench::DaemonUnderTest d = autouvm::bench::StartDaemon(
        daemon_path, config_path, dir,
        log_dir.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--log-level", "debug"});
    ResidencySampler residency(d.admin.get(), c.name);
    autouvm::bench::WaitModelReady(d, c.name);
    mark("model ready");
    const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);
    autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);  // profiles batch 1
    if (!autouvm::bench::WaitDecodeReady(d.admin.get(), c.name, absl::Seconds(120))) Die("no decode plan");
    const DaemonRun alone = autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);
    const double sweep_ms = 1e3 / alone.decode_tokens_per_s;
    mark("bursts starting");
    for (int w = 0; w < warmups; ++w) RunBurst(d, c.name, streams, prompt_len, tokens, ramp_ms);
    std::vector<Burst> bursts;
    for (int r = 0; r < repeats; ++r) bursts.push_back(RunBurst(d, c.name, streams, prompt_len, tokens, ramp_ms));
    mark("bursts done");
    residency.Stop();
    const int code = autouvm::bench::StopDaemon(&d);
    failures += code != 0;
    if (!log_dir.empty()) {
      std::filesystem::create_directories(log_dir);
      std::filesystem::copy_file(d.log, absl::StrCat(log_dir, "/daemon-", setting, ".log"),
                                 std::filesystem::copy_options::overwrite_existing);
    }
    for (size_t r = 0; r < bursts.size(); ++r) {
      const Burst& b = bursts[r];
      std::vector<double> ttft;
      Clock::time_point first_token = Clock::time_point::max(), last_token = Clock::time_point::min();
      // The longest wait between two tokens of any request, against the step of the full batch: the
      // median gap of the request that started last (with a ramp, it runs at the largest batch).
      double longest_gap = 0;
      size_t last_started = 0;
      for (size_t i = 0; i < b.runs.size(); ++i) {
        ttft.push_back(b.runs[i].ttft_ms);
        longest_gap = std::max(longest_gap, Max(b.runs[i].gaps_ms));
        if (b.started[i] > b.started[last_started]) last_started = i;
        const auto first = b.started[i] + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double, std::milli>(b.runs[i].ttft_ms));
        first_token = std::min(first_token, first);
        last_token = std::max(last_token, b.ended[i]);
      }
      const double wall_s = std::chrono::duration<double>(last_token - first_token).count();
      const Clock::time_point started = *std::min_element(b.started.begin(), b.started.end());
      // What a ModelStatus counter moved over the burst.
      auto delta = [&](uint64_t (autouvm::v1::ModelStatus::*field)() const) {
        return (unsigned long long)((b.after.*field)() - (b.before.*field)());
      };
      const uint64_t passes = delta(&autouvm::v1::ModelStatus::prefill_passes_total) +
                              delta(&autouvm::v1::ModelStatus::mixed_passes_total) +
                              delta(&autouvm::v1::ModelStatus::decode_steps_total);
      const double ms_per_pass =
          std::chrono::duration<double, std::milli>(last_token - started).count() / std::max<uint64_t>(passes, 1);
      const double aggregate = streams * (tokens - 1) / wall_s;
      const double ideal = streams * 1e3 / sweep_ms;
      const double p50 = Median(ttft), max = Max(ttft);
      const double steady = Median(b.runs[last_started].gaps_ms);
      std::printf(
          "| %s | %zu | %.1f | %.1f | %.1f | %.2f / %.2f | %.1f | %.1f | %.2f | %llu | %llu | %llu | %lld | %.1f | "
          "%llu / %llu / %llu | %.1f | %.1f | %.2f | %.3f | %.2f | %d |\n",
          setting.c_str(), r + 1, sweep_ms, p50, max, p50 / sweep_ms, max / sweep_ms, aggregate, ideal,
          aggregate / ideal, delta(&autouvm::v1::ModelStatus::prefill_passes_total),
          delta(&autouvm::v1::ModelStatus::mixed_passes_total), delta(&autouvm::v1::ModelStatus::decode_steps_total),
          (long long)(b.after.execution().gpu_fault_groups() - b.before.execution().gpu_fault_groups()), ms_per_pass,
          delta(&autouvm::v1::ModelStatus::passes_own_plan), delta(&autouvm::v1::ModelStatus::passes_nearest_plan),
          delta(&autouvm::v1::ModelStatus::passes_no_plan), longest_gap, steady, longest_gap / steady,
          static_cast<double>(b.after.execution().peak_resident_bytes()) / static_cast<double>(budget),
          static_cast<double>(b.after.execution().displaced_bytes()) / double(1 << 30), code);
    }
    std::printf(
        "\nmax_prefill_tokens %s: the executor's resident bytes, sampled every 100 ms from the daemon's start: %s\n",
        setting.c_str(), residency.Describe(budget).c_str());
    // Every request's gaps between tokens, pooled per burst: what a running request feels of the others'
    // prompts (Note [Steps sized by their cost], engine/step_cost.cc).
    for (size_t r = 0; r < bursts.size(); ++r) {
      std::vector<double> gaps;
      for (const DaemonRun& run : bursts[r].runs) gaps.insert(gaps.end(), run.gaps_ms.begin(), run.gaps_ms.end());
      std::sort(gaps.begin(), gaps.end());
      auto at = [&gaps](double q) {
        return gaps.empty() ? 0.0 : gaps[std::min(gaps.size() - 1, static_cast<size_t>(q * gaps.size()))];
      };
      std::printf(
          "max_prefill_tokens %s, burst %zu: inter-token gaps p50 / p90 / p99 / max: %.1f / %.1f / %.1f / %.1f ms\n",
          setting.c_str(), r + 1, at(0.5), at(0.9), at(0.99), gaps.empty() ? 0.0 : gaps.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::filesystem::remove_all(root);
  return failures == 0 ? 0 : 1;
}
