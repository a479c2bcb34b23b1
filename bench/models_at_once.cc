// models_at_once (GPU host): several models served by one daemon at once, each under its own device
// budget, each driven by its own client threads (issue 28: budgets that hold together, steps that
// interleave, models put to sleep and woken).
//
//   build-gpu/bench/models_at_once --preset 7b --models 2 --factor 2.0
//   build-gpu/bench/models_at_once --preset 7b --models 4 --factor 2.0 --streams 8 --seconds 60
//
// The entries are one Llama model's dimensions with weights generated on the GPU from different seeds.
// Each model is profiled by one request (its prefill and decode shapes) and warmed by a burst of
// --streams requests. Then each model runs alone, one stream, --repeats requests: its solo decode rate,
// whose step is the model's sweep. Then every model runs --streams streams at the same time as the others,
// each stream request after request, --repeats of them or for --seconds. For each model: its decode rate
// against the solo one, TTFT in ms and in its sweeps, and what its execution status says happened over
// the window (deltas): iterations followed and abandoned, plan switches, fault groups (the device's
// counters, so 0 for each means none on the device at all), and the bytes its executor moved over the
// link (fetched and read in place: its own, unlike the device's counters, which hold every model's
// traffic while its window was open). Their sum over the window is the link's load, against its rate
// measured by a copy before the daemon starts.
//
// Device memory: `nvidia-smi` is sampled every 100 ms from before the daemon starts to after it exits;
// the peak is also given for each step of the run (loading, profiling, alone, at once, asleep, woken).
// Issue 28's bound is the sum of the budgets plus runtime.device_reserve (its default, 5% of the spec's
// memory); the samples before the daemon started are the card's baseline (another tenant, the bench's
// sizing child gone).
//
// With --idle-sleep MS (models.<name>.idle_sleep, Note [A model asleep]), each model is then left idle
// until it sleeps and woken by one request: its TTFT, the pass that woke it, and the bytes that pass moved
// over the link (the pinned weights brought back, and one step's streamed weights as the window measured
// them) against the link's rate (issue 28: within 1.2 x that), beside the model's cold load (daemon start
// to READY).
#include <signal.h>
#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
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
using autouvm::bench::Max;
using autouvm::bench::Median;
using Clock = std::chrono::steady_clock;

struct PerModel {
  std::string name;
  std::vector<DaemonRun> solo;  // one stream, the model alone
  std::vector<DaemonRun> runs;  // every stream, all models at once
  std::mutex mu;                // guards runs
  autouvm::v1::ExecutionStatus before, after;
  autouvm::v1::ModelStatus at_start, at_end;   // its status around the window (turn waits, passes' times)
  double load_s = 0;                           // daemon start to READY
  autouvm::v1::ExecutionStatus asleep, woken;  // --idle-sleep: asleep, and after its waking request
  DaemonRun wake;
};

// The bytes a model's executor moved over the link: fetched to the device (staged copies, pinned weights
// and KV rows brought in) and read in place.
int64_t LinkBytes(const autouvm::v1::ExecutionStatus& s) { return s.prefetched_bytes() + s.in_place_read_bytes(); }

// nvidia-smi's memory.used (MiB) every 100 ms, into a file, from Start() to Stop().
class MemorySampler {
 public:
  explicit MemorySampler(std::string path) : path_(std::move(path)) {}
  bool Start() {
    if (!std::filesystem::exists(kSmi)) return false;
    pid_ =
        autouvm::bench::Spawn({kSmi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "100"}, path_);
    return pid_ > 0;
  }
  // The samples so far (MiB), in order.
  std::vector<double> Samples() const {
    std::vector<double> out;
    std::ifstream f(path_);
    for (std::string line; std::getline(f, line);) {
      if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) out.push_back(std::stod(line));
    }
    return out;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  static constexpr const char* kSmi = "/usr/bin/nvidia-smi";
  std::string path_;
  pid_t pid_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "models_at_once";
  CLI::App app{"models_at_once: several models under budgets in one daemon at once (GPU host)"};
  std::string preset = "7b";
  double factor = 2.0, seconds = 0;
  int models = 2, streams = 1, tokens = 64, prompt_len = 16, repeats = 3, idle_sleep_ms = 0;
  std::string daemon_path = AUTOUVMD_PATH, log_dir;
  app.add_option("--preset", preset, "7b, 13b or small");
  app.add_option("--models", models, "models served at once")->check(CLI::Range(1, 8));
  app.add_option("--factor", factor, "oversubscription of each model: its named bytes / its device budget");
  app.add_option("--streams", streams, "streams per model at once (its max_batch)")->check(CLI::Range(1, 64));
  app.add_option("--seconds", seconds, "run the streams at once this long (0: --repeats requests per stream)");
  app.add_option("--tokens", tokens, "tokens generated per request");
  app.add_option("--prompt", prompt_len, "prompt tokens");
  app.add_option("--repeats", repeats, "solo requests per model, and timed requests per stream without --seconds");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  app.add_option("--idle-sleep", idle_sleep_ms, "models.<name>.idle_sleep in ms: then time each model's wake (0: not)");
  app.add_option("--log-dir", log_dir, "keep the daemon's log here (models_at_once.log)");
  CLI11_PARSE(app, argc, argv);

  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/models-at-once-", getpid());
  const std::string repo = root + "/models";
  std::filesystem::create_directories(root);
  std::vector<PerModel> per(static_cast<size_t>(models));
  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  // In a child, before anything here touches torch: a child forked after CUDA is initialised cannot use it.
  const double link = autouvm::bench::MeasureLinkBytesPerS(spec);
  int64_t named = 0;
  for (int i = 0; i < models; ++i) {
    autouvm::engine::ModelConfig c =
        Check(autouvm::bench::LlamaConfig(preset, 7 + i, prompt_len + tokens + 8), "config");
    c.name = absl::StrCat("bench-", preset, "-", i);
    per[static_cast<size_t>(i)].name = c.name;
    if (i == 0) {
      // The named bytes, from the model as the daemon loads it, sized in a child process (bench/sized_entry.h):
      // sized here, the bench's own CUDA context kept the 7B's 13.5 GB on the card for the whole run.
      named = autouvm::bench::WriteSizedEntry(c, repo, streams, spec).named_bytes;
    } else {
      Check(autouvm::engine::WriteLlamaModel(c, 7 + i, repo), "writing the model entry");
    }
  }
  const int64_t budget = static_cast<int64_t>(static_cast<double>(named) / factor);
  const double reserve = 0.05 * static_cast<double>(spec.memory_bytes);  // runtime.device_reserve's default
  const std::string config_path = autouvm::bench::WriteCudaDaemonConfig(
      root, repo, spec.name,
      absl::StrCat("model_defaults: {max_batch: ", streams, ", policy: autouvm, device_budget: ", budget,
                   idle_sleep_ms > 0 ? absl::StrCat(", idle_sleep: ", idle_sleep_ms, "ms") : "", "}"));
  MemorySampler memory(root + "/memory.csv");
  const bool sampling = memory.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const size_t baseline_samples = memory.Samples().size();
  const auto started = Clock::now();
  // Progress on stderr, so that a run cut short still says how far it came; and where each step ended
  // in the memory samples, so that the peak of each is known.
  std::vector<std::pair<std::string, size_t>> steps;
  auto progress = [&](const std::string& what) {
    std::fprintf(stderr, "models_at_once: %.1f s: %s\n", std::chrono::duration<double>(Clock::now() - started).count(),
                 what.c_str());
    if (sampling) steps.emplace_back(what, memory.Samples().size());
  };
  autouvm::bench::DaemonUnderTest daemon = autouvm::bench::StartDaemon(daemon_path, config_path, root);
  for (PerModel& m : per) {
    autouvm::bench::WaitModelReady(daemon, m.name);
    m.load_s = std::chrono::duration<double>(Clock::now() - started).count();
    progress(m.name + " ready");
  }
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);
  autouvm::v1::Generation::Stub* gen = daemon.generation.get();
  autouvm::v1::Admin::Stub* admin = daemon.admin.get();

  // `streams` requests to the model at once, each repeated while `more` says so; into m.runs if `keep`.
  auto burst = [&](PerModel& m, bool keep, const std::function<bool(int)>& more) {
    std::vector<std::thread> ts;
    for (int s = 0; s < streams; ++s) {
      ts.emplace_back([&] {
        for (int i = 0; more(i); ++i) {
          DaemonRun r = autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);
          if (keep) {
            std::lock_guard<std::mutex> lock(m.mu);
            m.runs.push_back(std::move(r));
          }
        }
      });
    }
    for (std::thread& t : ts) t.join();
  };
  {  // profiled and warmed, every model at once
    std::vector<std::thread> ts;
    for (PerModel& m : per) {
      ts.emplace_back([&] {
        autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);  // profiles
        autouvm::bench::WaitDecodeReady(admin, m.name, absl::Seconds(60));
        burst(m, false, [](int i) { return i < 1; });  // warm: the batch's shapes
      });
    }
    for (std::thread& t : ts) t.join();
  }
  progress("profiled and warmed");
  for (PerModel& m : per) {                                              // alone, one stream
    autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);  // the model awake, the others idle
    for (int i = 0; i < repeats; ++i)
      m.solo.push_back(autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens));
    progress(m.name + " alone: done");
  }
  // Every model at once: each model's streams, all started together.
  std::barrier timed(models);
  Clock::time_point window_from, window_to;
  {
    std::vector<std::thread> ts;
    for (size_t k = 0; k < per.size(); ++k) {
      ts.emplace_back([&, k] {
        PerModel& m = per[k];
        // Awake (with --idle-sleep the others slept through the solo runs), all within a request of the start.
        autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);
        timed.arrive_and_wait();
        const autouvm::v1::ModelStatus st = autouvm::bench::ModelStatusOf(admin, m.name);
        m.before = st.execution();
        m.at_start = st;
        timed.arrive_and_wait();
        if (k == 0) window_from = Clock::now();
        const Clock::time_point until =
            Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        burst(m, true, [&](int i) { return seconds > 0 ? Clock::now() < until : i < repeats; });
        timed.arrive_and_wait();
        if (k == 0) window_to = Clock::now();
        const autouvm::v1::ModelStatus done = autouvm::bench::ModelStatusOf(admin, m.name);
        m.after = done.execution();
        m.at_end = done;
      });
    }
    for (std::thread& t : ts) t.join();
  }
  progress("at once: done");
  // Every model idle until it sleeps (a model going to sleep holds the backend while its weights move:
  // a wake beside it would be timed with that), then each woken by one request, one model at a time.
  for (PerModel& m : per) {
    if (idle_sleep_ms <= 0) break;
    for (int i = 0; i < 600 && !autouvm::bench::ModelStatusOf(admin, m.name).execution().asleep(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    m.asleep = autouvm::bench::ModelStatusOf(admin, m.name).execution();
    if (!m.asleep.asleep()) Die(absl::StrCat(m.name, " did not sleep within a minute of idle_sleep"));
  }
  if (idle_sleep_ms > 0) progress("all asleep");
  for (PerModel& m : per) {
    if (idle_sleep_ms <= 0) break;
    m.wake = autouvm::bench::GenerateThroughDaemon(gen, m.name, prompt, tokens);
    m.woken = autouvm::bench::ModelStatusOf(admin, m.name).execution();
    progress(m.name + " woken");
  }
  const int code = autouvm::bench::StopDaemon(&daemon);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  memory.Stop();
  if (!log_dir.empty()) {
    std::filesystem::create_directories(log_dir);
    std::filesystem::copy_file(daemon.log, log_dir + "/models_at_once.log",
                               std::filesystem::copy_options::overwrite_existing);
  }

  const double window_s = std::chrono::duration<double>(window_to - window_from).count();
  std::printf(
      "%d models of the %s preset at once, %.2f GiB named each (KV for %d streams), budget %.2f GiB each (factor "
      "%.2f); %d prompt tokens, %d generated; solo: %d requests of one stream; at once: %d streams a model, %s "
      "(%.1f s); link measured %.1f GB/s; daemon exit %d\n\n",
      models, preset.c_str(), named / double(1 << 30), streams, budget / double(1 << 30), factor, prompt_len, tokens,
      repeats, streams,
      seconds > 0 ? absl::StrCat(seconds, " s").c_str() : absl::StrCat(repeats, " requests each").c_str(), window_s,
      link / 1e9, code);
  std::printf(
      "| model | solo tok/s | solo step (sweep) ms | solo TTFT ms | at once tok/s | at once / solo | requests | TTFT "
      "p50 / max ms | "
      "TTFT p50 / max, sweeps | prefill pass ms | decode pass ms | turn wait ms / request | followed | abandoned | "
      "plan switches | ms / switch | fault groups | link GiB (own) | link GB/s (own) | last error |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_followed = true;
  double link_bytes = 0;
  for (const PerModel& m : per) {
    std::vector<double> solo, solo_ttft, tps, ttft;
    for (const DaemonRun& r : m.solo) {
      solo.push_back(r.decode_tokens_per_s);
      solo_ttft.push_back(r.ttft_ms);
    }
    for (const DaemonRun& r : m.runs) {
      tps.push_back(r.decode_tokens_per_s);
      ttft.push_back(r.ttft_ms);
    }
    const double sweep_ms = Median(solo) > 0 ? 1e3 / Median(solo) : 0;
    const uint64_t followed = m.after.followed_iterations() - m.before.followed_iterations();
    const uint64_t abandoned = m.after.abandoned_iterations() - m.before.abandoned_iterations();
    const int64_t faults = m.after.gpu_fault_groups() - m.before.gpu_fault_groups();
    // A switch runs before its pass's turn, beside the other models' passes; a request's prefill waits
    // for the pass in progress (Note [Passes by shares]): the two that TTFT adds to a sweep.
    const uint64_t switches = m.after.plan_switches() - m.before.plan_switches();
    const double switch_ms =
        switches > 0 ? 1e3 * (m.after.plan_switch_seconds() - m.before.plan_switch_seconds()) / switches : 0;
    const autouvm::v1::ModelStatus &a = m.at_start, &z = m.at_end;
    const double wait_ms = m.runs.empty() ? 0 : 1e3 * (z.turn_wait_seconds() - a.turn_wait_seconds()) / m.runs.size();
    // The mean pass of each kind over the window (its hooks, a switch, included; its turn's wait not).
    auto mean_ms = [](double s, uint64_t n) { return n > 0 ? 1e3 * s / static_cast<double>(n) : 0.0; };
    const double prefill_ms = mean_ms(z.prefill_pass_seconds() - a.prefill_pass_seconds(),
                                      z.prefill_passes_total() - a.prefill_passes_total());
    const double decode_ms =
        mean_ms(z.decode_pass_seconds() - a.decode_pass_seconds(), z.decode_steps_total() - a.decode_steps_total());
    const double own = static_cast<double>(LinkBytes(m.after) - LinkBytes(m.before));
    link_bytes += own;
    all_followed &= abandoned == 0 && followed > 0;
    std::printf(
        "| %s | %.2f | %.1f | %.0f | %.2f | %.3f | %zu | %.0f / %.0f | %.2f / %.2f | %.1f | %.1f | %.0f | %llu | %llu "
        "| "
        "%llu | %.1f | %lld | %.2f | %.1f | %s |\n",
        m.name.c_str(), Median(solo), sweep_ms, Median(solo_ttft), Median(tps),
        Median(solo) > 0 ? Median(tps) / Median(solo) : 0, m.runs.size(), Median(ttft), Max(ttft),
        sweep_ms > 0 ? Median(ttft) / sweep_ms : 0, sweep_ms > 0 ? Max(ttft) / sweep_ms : 0, prefill_ms, decode_ms,
        wait_ms, (unsigned long long)followed, (unsigned long long)abandoned, (unsigned long long)switches, switch_ms,
        (long long)faults, own / double(1 << 30), window_s > 0 ? own / window_s / 1e9 : 0,
        m.after.last_error().c_str());
  }
  // The device's counters: a model's window holds every model's traffic while it is open (docs/metrics.md),
  // so the largest delta over the models is the device's H2D over the window (copies and migrations; reads in
  // place not counted).
  double device_h2d = 0;
  for (const PerModel& m : per) device_h2d = std::max(device_h2d, double(m.after.h2d_bytes() - m.before.h2d_bytes()));
  std::printf(
      "\nThe link while every model streamed (%.1f s): the models' executors moved %.2f GiB, %.1f GB/s = %.3f of the "
      "link's measured rate; the device's counters saw %.2f GiB host-to-device, %.1f GB/s = %.3f\n",
      window_s, link_bytes / double(1 << 30), window_s > 0 ? link_bytes / window_s / 1e9 : 0,
      window_s > 0 ? link_bytes / window_s / link : 0, device_h2d / double(1 << 30),
      window_s > 0 ? device_h2d / window_s / 1e9 : 0, window_s > 0 ? device_h2d / window_s / link : 0);
  const std::vector<double> samples = memory.Samples();
  if (sampling && samples.size() > baseline_samples) {
    const std::vector<double> before(samples.begin(), samples.begin() + static_cast<long>(baseline_samples));
    const std::vector<double> during(samples.begin() + static_cast<long>(baseline_samples), samples.end());
    const double base = before.empty() ? 0 : Max(before);
    const double bound_mib = (static_cast<double>(budget) * models + reserve) / double(1 << 20);
    std::printf(
        "Device memory (nvidia-smi every 100 ms): %zu samples before the daemon, at most %.0f MiB; %zu from its start "
        "to its exit, at most %.0f MiB, %.0f MiB over the baseline, against the budgets (%d x %.0f MiB) plus the "
        "reserve (%.0f MiB) = %.0f MiB: %s\n",
        before.size(), base, during.size(), Max(during), Max(during) - base, models, budget / double(1 << 20),
        reserve / double(1 << 20), bound_mib, Max(during) - base <= bound_mib ? "within" : "OVER");
    // The peak over the baseline up to each step's end, from the last's (the last: to the daemon's exit).
    std::printf("Peak over the baseline by step (MiB):");
    size_t from = baseline_samples;
    steps.emplace_back("the end", samples.size());
    for (const auto& [what, to] : steps) {
      const size_t end = std::min(to, samples.size());
      if (end <= from) continue;
      std::printf(" %s %.0f;", what.c_str(),
                  Max(std::vector<double>(samples.begin() + static_cast<long>(from),
                                          samples.begin() + static_cast<long>(end))) -
                      base);
      from = end;
    }
    std::printf("\n");
  } else {
    std::printf("Device memory: not sampled (no /usr/bin/nvidia-smi)\n");
  }
  if (idle_sleep_ms > 0) {
    std::printf(
        "\nidle_sleep %d ms: each model asleep, then one request. Link: %.1f GB/s measured. The wake's bytes: the "
        "pinned weights brought back, and one step's own link bytes as the window measured them.\n\n"
        "| model | cold load s | asleep: resident GiB | woken: resident GiB | brought back GiB | one step's GiB | "
        "(back + step) / link s | wake pass s | TTFT s | TTFT / ((back + step) / link) | TTFT / (back / link) "
        "|\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        idle_sleep_ms, link / 1e9);
    for (const PerModel& m : per) {
      const double back = static_cast<double>(m.woken.resident_bytes() - m.asleep.resident_bytes());
      const double passes = static_cast<double>(m.after.followed_iterations() - m.before.followed_iterations());
      const double step = passes > 0 ? static_cast<double>(LinkBytes(m.after) - LinkBytes(m.before)) / passes : 0;
      const double floor_s = (back + step) / link, ttft_s = m.wake.ttft_ms / 1e3;
      std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", m.name.c_str(),
                  m.load_s, m.asleep.resident_bytes() / double(1 << 30), m.woken.resident_bytes() / double(1 << 30),
                  back / double(1 << 30), step / double(1 << 30), floor_s, m.woken.last_wake_seconds(), ttft_s,
                  floor_s > 0 ? ttft_s / floor_s : 0, back > 0 ? ttft_s / (back / link) : 0);
    }
  }
  std::filesystem::remove_all(root);
  return all_followed && code == 0 ? 0 : 1;
}
