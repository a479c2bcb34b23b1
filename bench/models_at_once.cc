// models_at_once (GPU host): several models served by one daemon at once, each under its own device
// budget, each driven by its own client thread; does every model follow its plan while the others run?
// (ARCHITECTURE.md: observation is scoped per model session, so no model runs an iteration without its
// plan because another model is running one.)
//
//   build-gpu/bench/models_at_once --preset 7b --models 2 --factor 2.0
//
// The entries are one Llama model's dimensions with weights generated on the GPU from different seeds.
// Each model is profiled by one request (its prefill and decode shapes), warmed by another, then every
// model runs --repeats timed requests at the same time as the others. For each model: decode tokens/s
// and TTFT (medians), and what its execution status says happened over the timed requests (deltas):
// iterations followed and abandoned, plan switches, and the backend's unified-memory counters over its
// followed iterations (fault groups and host->device bytes; added at each iteration's end as far as the
// backend has delivered them, up to its counter lag behind; the counters are the device's, so one model's
// window also holds what the others moved meanwhile: 0 fault groups for each means none on the device at
// all).
//
// With --idle-sleep MS (models.<name>.idle_sleep, Note [A model asleep]), each model is then left idle
// until it sleeps and woken by one request: its TTFT, the pass that woke it, and the bytes it brought
// back against them over the link's rate (issue 28: the first token after waking within 1.2 x that),
// beside the model's cold load (daemon start to READY).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/decode_harness.h"
#include "bench/sized_entry.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/compute_device.h"
#include "runtime/gpu_spec.h"

namespace {

using autouvm::bench::Check;
using autouvm::bench::DaemonRun;
using autouvm::bench::Die;
using autouvm::bench::Median;

struct PerModel {
  std::string name;
  std::vector<DaemonRun> runs;
  autouvm::v1::ExecutionStatus before, after;
  double load_s = 0;                           // daemon start to READY
  autouvm::v1::ExecutionStatus asleep, woken;  // --idle-sleep: asleep, and after its waking request
  DaemonRun wake;
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "models_at_once";
  CLI::App app{"models_at_once: several models under budgets in one daemon at once (GPU host)"};
  std::string preset = "7b";
  double factor = 2.0;
  int models = 2, tokens = 64, prompt_len = 16, repeats = 3, idle_sleep_ms = 0;
  std::string daemon_path = AUTOUVMD_PATH;
  app.add_option("--preset", preset, "7b, 13b or small");
  app.add_option("--models", models, "models served at once")->check(CLI::Range(1, 8));
  app.add_option("--factor", factor, "oversubscription of each model: its named bytes / its device budget");
  app.add_option("--tokens", tokens, "tokens generated per request");
  app.add_option("--prompt", prompt_len, "prompt tokens");
  app.add_option("--repeats", repeats, "timed requests per model");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  app.add_option("--idle-sleep", idle_sleep_ms, "models.<name>.idle_sleep in ms: then time each model's wake (0: not)");
  CLI11_PARSE(app, argc, argv);

  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/models-at-once-", getpid());
  const std::string repo = root + "/models";
  std::vector<PerModel> per(static_cast<size_t>(models));
  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  int64_t named = 0;
  for (int i = 0; i < models; ++i) {
    autouvm::engine::ModelConfig c =
        Check(autouvm::bench::LlamaConfig(preset, 7 + i, prompt_len + tokens + 8), "config");
    c.name = absl::StrCat("bench-", preset, "-", i);
    per[static_cast<size_t>(i)].name = c.name;
    if (i == 0) {
      // The named bytes, from the model as the daemon loads it, sized in a child process (bench/sized_entry.h):
      // sized here, the bench's own CUDA context kept the 7B's 13.5 GB on the card for the whole run.
      named = autouvm::bench::WriteSizedEntry(c, repo, 1, spec).named_bytes;
    } else {
      Check(autouvm::engine::WriteLlamaModel(c, 7 + i, repo), "writing the model entry");
    }
  }
  const int64_t budget = static_cast<int64_t>(static_cast<double>(named) / factor);
  const std::string config_path = autouvm::bench::WriteCudaDaemonConfig(
      root, repo, spec.name,
      absl::StrCat("model_defaults: {max_batch: 1, policy: autouvm, device_budget: ", budget,
                   idle_sleep_ms > 0 ? absl::StrCat(", idle_sleep: ", idle_sleep_ms, "ms") : "", "}"));
  const auto started = std::chrono::steady_clock::now();
  autouvm::bench::DaemonUnderTest daemon = autouvm::bench::StartDaemon(daemon_path, config_path, root);
  for (PerModel& m : per) {
    autouvm::bench::WaitModelReady(daemon, m.name);
    m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);

  std::barrier timed(models);
  std::vector<std::thread> clients;
  for (PerModel& m : per) {
    clients.emplace_back([&] {
      autouvm::v1::Generation::Stub* gen = daemon.generation.get();
      autouvm::v1::Admin::Stub* admin = daemon.admin.get();
      autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);  // profiles
      autouvm::bench::WaitDecodeReady(admin, m.name, absl::Seconds(60));
      autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);  // warm
      timed.arrive_and_wait();                                             // every model timed at once
      m.before = autouvm::bench::ModelStatusOf(admin, m.name).execution();
      for (int i = 0; i < repeats; ++i)
        m.runs.push_back(autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens));
      m.after = autouvm::bench::ModelStatusOf(admin, m.name).execution();
    });
  }
  for (std::thread& t : clients) t.join();
  // Each model idle until it sleeps, then woken by one request, one model at a time.
  for (PerModel& m : per) {
    if (idle_sleep_ms <= 0) break;
    autouvm::v1::Admin::Stub* admin = daemon.admin.get();
    for (int i = 0; i < 600 && !autouvm::bench::ModelStatusOf(admin, m.name).execution().asleep(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    m.asleep = autouvm::bench::ModelStatusOf(admin, m.name).execution();
    if (!m.asleep.asleep()) Die(absl::StrCat(m.name, " did not sleep within a minute of idle_sleep"));
    m.wake = autouvm::bench::GenerateThroughDaemon(daemon.generation.get(), m.name, prompt, tokens);
    m.woken = autouvm::bench::ModelStatusOf(admin, m.name).execution();
  }
  const int code = autouvm::bench::StopDaemon(&daemon);

  std::printf(
      "%d models of the %s preset at once, %.2f GiB named each, budget %.2f GiB each (factor %.2f); "
      "%d prompt tokens, %d generated, %d timed requests per model; daemon exit %d\n\n",
      models, preset.c_str(), named / double(1 << 30), budget / double(1 << 30), factor, prompt_len, tokens, repeats,
      code);
  std::printf(
      "| model | decode tok/s | TTFT ms | followed | abandoned | plan switches | fault groups | "
      "H2D GiB | H2D GiB per decode step | last error |\n|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_followed = true;
  for (const PerModel& m : per) {
    std::vector<double> tps, ttft;
    for (const DaemonRun& r : m.runs) {
      tps.push_back(r.decode_tokens_per_s);
      ttft.push_back(r.ttft_ms);
    }
    const uint64_t followed = m.after.followed_iterations() - m.before.followed_iterations();
    const uint64_t abandoned = m.after.abandoned_iterations() - m.before.abandoned_iterations();
    const int64_t faults = m.after.gpu_fault_groups() - m.before.gpu_fault_groups();
    const double h2d = (m.after.h2d_bytes() - m.before.h2d_bytes()) / double(1 << 30);
    all_followed &= abandoned == 0 && followed > 0;
    std::printf("| %s | %.2f | %.1f | %llu | %llu | %llu | %lld | %.2f | %.2f | %s |\n", m.name.c_str(), Median(tps),
                Median(ttft), (unsigned long long)followed, (unsigned long long)abandoned,
                (unsigned long long)(m.after.plan_switches() - m.before.plan_switches()), (long long)faults, h2d,
                h2d / (repeats * (tokens - 1)), m.after.last_error().c_str());
  }
  if (idle_sleep_ms > 0) {
    std::printf(
        "\nidle_sleep %d ms: each model asleep, then one request (link %.1f GB/s, the spec's)\n\n"
        "| model | cold load s | asleep: resident GiB | woken: resident GiB | brought back / link s | wake pass s | "
        "TTFT s | TTFT / (brought back / link) |\n|---|---|---|---|---|---|---|---|\n",
        idle_sleep_ms, spec.link_bytes_per_s / 1e9);
    for (const PerModel& m : per) {
      const double back = static_cast<double>(m.woken.resident_bytes() - m.asleep.resident_bytes());
      const double floor_s = back / spec.link_bytes_per_s;
      std::printf("| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.2f |\n", m.name.c_str(), m.load_s,
                  m.asleep.resident_bytes() / double(1 << 30), m.woken.resident_bytes() / double(1 << 30), floor_s,
                  m.woken.last_wake_seconds(), m.wake.ttft_ms / 1e3,
                  floor_s > 0 ? m.wake.ttft_ms / 1e3 / floor_s : 0.0);
    }
  }
  std::filesystem::remove_all(root);
  return all_followed && code == 0 ? 0 : 1;
}
