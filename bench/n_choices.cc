// n_choices: OpenAI's `n` through the daemon's HTTP API. n samples of one prompt in one request share its
// prefill (Note [Identical prompts share their prefill], engine/step_policy.cc): the prompt's whole KV
// blocks are computed once and each later choice computes only its tail. Against them, side by side on
// the same daemon: n requests started together whose prompts, of the same length, differ in their first
// id, so that each pays its own prefill.
//
//   build/bench/n_choices --cpu --prompt 256 --tokens 16                  # the CPU backend's tiny model
//   build-gpu/bench/n_choices --preset 7b --factor 2.0 --prompt 2048      # GPU host: 7B under weights / 2
//
// Every request samples (temperature 1, a seed per request: the choices differ), EOS ignored, --tokens
// tokens per choice, prompts as token ids, streamed with `logprobs: 0` so that each token is timed as it
// arrives (bench/http_stream_client.h). Per n of --ns, --repeats rounds of: the shared request, then the
// n distinct ones. Reported per n and way, p50 over rounds: the TTFT of the first and of the last choice
// to get its first token, the time to the last token of all, and the daemon's prefill passes and prompt
// rows per round (ModelStatus' prefill_passes_total + mixed_passes_total, prefill_rows_total), then the
// shared / distinct ratios. The decode step (one sweep of the weights under a budget) is the p50 gap
// between tokens of n = 1's shared request, for reading the TTFTs in steps.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/http_stream_client.h"
#include "bench/preset_daemon.h"

namespace {

using autouvm::bench::DaemonRun;
using autouvm::bench::Die;
using autouvm::bench::Median;
using Clock = std::chrono::steady_clock;

struct Round {
  double first_ttft_ms = 0, last_ttft_ms = 0, total_ms = 0;
  double prefill_passes = 0, prompt_rows = 0;
  std::vector<double> gaps_ms;
};

struct Counts {
  double passes = 0, rows = 0;
};

Counts PrefillCounts(autouvm::v1::Admin::Stub* admin, const std::string& model) {
  const autouvm::v1::ModelStatus s = autouvm::bench::ModelStatusOf(admin, model);
  return {static_cast<double>(s.prefill_passes_total() + s.mixed_passes_total()),
          static_cast<double>(s.prefill_rows_total())};
}

Round Summarize(const std::vector<DaemonRun>& runs, Clock::time_point start, const Counts& before,
                const Counts& after) {
  Round r;
  r.first_ttft_ms = 1e300;
  Clock::time_point last = start;
  for (const DaemonRun& run : runs) {
    r.first_ttft_ms = std::min(r.first_ttft_ms, run.ttft_ms);
    r.last_ttft_ms = std::max(r.last_ttft_ms, run.ttft_ms);
    last = std::max(last, run.last_token);
    r.gaps_ms.insert(r.gaps_ms.end(), run.gaps_ms.begin(), run.gaps_ms.end());
  }
  r.total_ms = 1e3 * std::chrono::duration<double>(last - start).count();
  r.prefill_passes = after.passes - before.passes;
  r.prompt_rows = after.rows - before.rows;
  return r;
}

struct Way {
  std::vector<Round> rounds;
  double P50(double Round::*field) const {
    std::vector<double> v;
    for (const Round& r : rounds) v.push_back(r.*field);
    return Median(v);
  }
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "n_choices";
  CLI::App app{"n_choices: n samples of one prompt in one request (one shared prefill) against n prompts at once"};
  bool cpu = false;
  std::string preset, ns_text = "1,2,4,8";
  double factor = 2.0;
  int tokens = 32, prompt_len = 1024, repeats = 3;
  std::string daemon_path = AUTOUVMD_PATH;
  auto* cpu_flag = app.add_flag("--cpu", cpu, "the CPU backend and its generated tiny model");
  app.add_option("--preset", preset, "GPU host: 7b, mistral7b, 13b or small, generated on the GPU")->excludes(cpu_flag);
  app.add_option("--factor", factor, "with --preset: oversubscription, the weights' bytes / the device budget")
      ->check(CLI::PositiveNumber);
  app.add_option("--ns", ns_text, "the n to measure, comma-separated (each 1..64)");
  app.add_option("--tokens", tokens, "tokens generated per choice")->check(CLI::Range(2, 4096));
  app.add_option("--prompt", prompt_len, "prompt tokens")->check(CLI::Range(1, 8192));
  app.add_option("--repeats", repeats, "timed rounds per n and way")->check(CLI::Range(1, 1000));
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  CLI11_PARSE(app, argc, argv);
  if (cpu == !preset.empty()) Die("give --cpu or --preset");
  std::vector<int> ns;
  for (absl::string_view part : absl::StrSplit(ns_text, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 64) Die("--ns: expected numbers 1..64, got " + ns_text);
    ns.push_back(n);
  }
  const int max_n = *std::max_element(ns.begin(), ns.end());

  const std::string dir = absl::StrCat(std::filesystem::temp_directory_path().string(), "/n-choices-", getpid());
  std::filesystem::create_directories(dir);
  autouvm::bench::ServedModel served;
  if (cpu) {
    served.model = "tiny-llama";
    served.config_path = autouvm::bench::WriteCpuDaemonConfig(
        dir, served.model, absl::StrCat("model_defaults: {max_batch: ", max_n, ", max_queue: 64}"));
    served.about = "tiny-llama (generated by the daemon) on the CPU backend";
  } else {
    served = autouvm::bench::WritePresetDaemonConfig(dir, preset, factor, max_n, prompt_len + tokens + 8);
  }
  const std::string http_port_file = dir + "/http-port";
  autouvm::bench::DaemonUnderTest d = autouvm::bench::StartDaemon(
      daemon_path, served.config_path, dir, {"--http-listen", "127.0.0.1:0", "--http-port-file", http_port_file});
  const std::string http_port_text = autouvm::bench::ReadWholeFile(http_port_file);  // written before gRPC's
  if (http_port_text.empty()) Die("the daemon wrote no HTTP port: " + autouvm::bench::ReadWholeFile(d.log));
  const int http_port = std::stoi(http_port_text);
  autouvm::bench::WaitModelReady(d, served.model);
  const int64_t vocab = autouvm::bench::ModelStatusOf(d.admin.get(), served.model).info().vocab_size();
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len, vocab);
  int64_t seed = 1;

  // One untimed request of each kind first (their shapes' plans).
  autouvm::bench::GenerateChoicesThroughHttp(http_port, served.model, prompt, tokens,
                                             {.n = max_n, .temperature = 1, .seed = seed++});
  if (!autouvm::bench::WaitDecodeReady(d.admin.get(), served.model, absl::Seconds(120))) Die("no decode plan");

  // n requests started together, one client thread each; the i-th prompt's first id is its own.
  auto distinct = [&](int n) {
    std::vector<std::vector<DaemonRun>> runs(static_cast<size_t>(n));
    std::barrier go(n);
    std::vector<std::thread> clients;
    const int64_t base = seed;
    seed += n;
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([&, i] {
        std::vector<int32_t> own = prompt;
        own[0] = static_cast<int32_t>(1 + i);
        go.arrive_and_wait();
        runs[static_cast<size_t>(i)] = autouvm::bench::GenerateChoicesThroughHttp(
            http_port, served.model, own, tokens, {.n = 1, .temperature = 1, .seed = base + i});
      });
    }
    for (std::thread& t : clients) t.join();
    std::vector<DaemonRun> all;
    for (auto& r : runs) all.push_back(std::move(r[0]));
    return all;
  };
  distinct(max_n);

  std::vector<Way> shared(ns.size()), apart(ns.size());
  for (int round = 0; round < repeats; ++round) {
    for (size_t k = 0; k < ns.size(); ++k) {
      const int n = ns[k];
      Counts before = PrefillCounts(d.admin.get(), served.model);
      Clock::time_point start = Clock::now();
      const std::vector<DaemonRun> one = autouvm::bench::GenerateChoicesThroughHttp(
          http_port, served.model, prompt, tokens, {.n = n, .temperature = 1, .seed = seed++});
      shared[k].rounds.push_back(Summarize(one, start, before, PrefillCounts(d.admin.get(), served.model)));
      before = PrefillCounts(d.admin.get(), served.model);
      start = Clock::now();
      const std::vector<DaemonRun> many = distinct(n);
      apart[k].rounds.push_back(Summarize(many, start, before, PrefillCounts(d.admin.get(), served.model)));
    }
  }
  const int code = autouvm::bench::StopDaemon(&d);

  double step_ms = 0;
  for (size_t k = 0; k < ns.size(); ++k) {
    if (ns[k] != 1) continue;
    std::vector<double> gaps;
    for (const Round& r : shared[k].rounds) gaps.insert(gaps.end(), r.gaps_ms.begin(), r.gaps_ms.end());
    step_ms = Median(gaps);
  }
  std::printf(
      "%s; %d prompt tokens (ids), %d generated per choice (temperature 1, seeded, EOS ignored), streamed over "
      "HTTP; %d timed rounds per n and way, p50 shown; decode step of one stream (n = 1's token gaps, p50): %.1f "
      "ms; daemon exit %d\n\n",
      served.about.c_str(), prompt_len, tokens, repeats, step_ms, code);
  std::printf(
      "| n | way | first TTFT ms | last TTFT ms | last TTFT, decode steps | all done ms | prefill passes | prompt "
      "rows |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t k = 0; k < ns.size(); ++k) {
    for (const auto& [name, way] :
         {std::pair{"one request, n choices", &shared[k]}, std::pair{"n requests, distinct prompts", &apart[k]}}) {
      const double last = way->P50(&Round::last_ttft_ms);
      std::printf("| %d | %s | %.1f | %.1f | %.2f | %.1f | %.0f | %.0f |\n", ns[k], name,
                  way->P50(&Round::first_ttft_ms), last, step_ms > 0 ? last / step_ms : 0, way->P50(&Round::total_ms),
                  way->P50(&Round::prefill_passes), way->P50(&Round::prompt_rows));
    }
  }
  std::printf("\n| n | last TTFT shared / distinct | all done shared / distinct |\n|---|---|---|\n");
  for (size_t k = 0; k < ns.size(); ++k) {
    std::printf("| %d | %.3f | %.3f |\n", ns[k],
                shared[k].P50(&Round::last_ttft_ms) / apart[k].P50(&Round::last_ttft_ms),
                shared[k].P50(&Round::total_ms) / apart[k].P50(&Round::total_ms));
  }
  std::filesystem::remove_all(dir);
  return code == 0 ? 0 : 1;
}
