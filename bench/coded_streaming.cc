// coded_streaming (GPU host): issue 30's decode through the daemon with streamed weights exponent-coded
// (runtime.compress_streamed, Note [Coded host copies]) against the same daemon streaming them plain,
// side by side in one run, and the greedy tokens of both against the model resident.
//
//   build-gpu/bench/coded_streaming --preset 7b --factors 1.5,2.0
//
// One Llama entry (weights generated on the GPU at load, as autouvm-mkmodel's are); for the resident run
// and each factor (named bytes / device budget), plain then coded, each with its streamed steps eager and
// captured as CUDA graphs (--graphs; runtime.cuda_graphs_streaming, Note [Coded copies captured]), a
// daemon of its own: one request
// profiles, one warms; a coded daemon is then sent short requests until nearly all it stages crosses
// coded (its host copies are encoded in the background); then --repeats timed requests. Per run: decode
// tokens/s and the step, what crossed the link per step (h2d), how much of it coded, the ratio of bf16
// bytes decoded to coded bytes, the decoder's GPU time per step, and the step against the plain run's
// bf16 link floor (the weights it streams each step over the spec's link rate; issue 30's target: <= 0.8).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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

// The timed requests' logprobs: each token's and its 20 most likely alternatives', compared bit for bit
// with the resident run's (the logits as the daemon's API shows them).
constexpr int kLogprobs = 20;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Run {
  std::string what;
  double factor = 0;  // 0: resident
  bool coded = false;
  bool graphs = false;  // runtime.cuda_graphs_streaming: streamed steps captured with their copies
  int64_t budget = 0;
  std::vector<DaemonRun> runs;
  autouvm::v1::ExecutionStatus before, after;
  autouvm::v1::StepGraphStatus graph_status;
  int warm_requests = 0;  // short requests until the coded copies were in use
  int exit_code = 0;
};

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "coded_streaming";
  CLI::App app{"coded_streaming: streamed weights coded against plain, through the daemon (GPU host)"};
  std::string preset = "7b", factors_flag = "1.5,2.0";
  int tokens = 64, prompt_len = 16, repeats = 2;
  std::string daemon_path = AUTOUVMD_PATH, log_dir;
  app.add_option("--preset", preset, "7b, 13b or small");
  app.add_option("--factors", factors_flag, "oversubscription factors: named bytes / device budget");
  app.add_option("--tokens", tokens, "tokens generated per request");
  app.add_option("--prompt", prompt_len, "prompt tokens");
  app.add_option("--repeats", repeats, "timed requests per run");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  app.add_option("--log-dir", log_dir, "keep each daemon's log (--log-level debug: a line per pass) here");
  std::string graphs_flag = "off,on";
  app.add_option("--graphs", graphs_flag,
                 "runtime.cuda_graphs_streaming for the runs under a budget: off, on, or off,on (both, side by side)");
  CLI11_PARSE(app, argc, argv);
  std::vector<bool> graph_modes;
  for (const std::string& g : std::vector<std::string>(absl::StrSplit(graphs_flag, ','))) {
    if (g != "off" && g != "on") Die(absl::StrCat("--graphs: off, on or off,on, not ", graphs_flag));
    graph_modes.push_back(g == "on");
  }

  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/coded-streaming-", getpid());
  const std::string repo = root + "/models";
  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  autouvm::engine::ModelConfig c = Check(autouvm::bench::LlamaConfig(preset, 7, prompt_len + tokens + 8), "config");
  c.name = absl::StrCat("bench-", preset);
  // Sized in a child process (bench/sized_entry.h), so that the bench holds nothing on the card.
  const int64_t named = autouvm::bench::WriteSizedEntry(c, repo, 1, spec).named_bytes;
  const double link = autouvm::bench::MeasureLinkBytesPerS(spec);  // in a child process too
  std::vector<Run> runs;
  runs.push_back({.what = "resident", .budget = named + (int64_t{4} << 30)});
  for (const std::string& f : std::vector<std::string>(absl::StrSplit(factors_flag, ','))) {
    const double factor = std::stod(f);
    const auto budget = static_cast<int64_t>(static_cast<double>(named) / factor);
    for (const bool coded : {false, true}) {
      for (const bool graphs : graph_modes) {
        runs.push_back(
            {.what = absl::StrCat("factor ", f, coded ? ", coded" : ", plain", graphs ? ", graphs" : ", eager"),
             .factor = factor,
             .coded = coded,
             .graphs = graphs,
             .budget = budget});
      }
    }
  }
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);
  for (Run& r : runs) {
    const std::string dir = absl::StrCat(root, "/run-", &r - runs.data());
    std::filesystem::create_directories(dir);
    const std::string config = autouvm::bench::WriteCudaDaemonConfig(
        dir, repo, spec.name,
        absl::StrCat("models: {", c.name, ": {max_batch: 1, policy: autouvm, device_budget: ", r.budget, "}}"),
        absl::StrCat("cuda_graphs_streaming: ", r.graphs ? "true" : "false",
                     r.coded ? ", compress_streamed: true" : ""));
    autouvm::bench::DaemonUnderTest d = autouvm::bench::StartDaemon(
        daemon_path, config, dir,
        log_dir.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--log-level", "debug"});
    autouvm::bench::WaitModelReady(d, c.name);
    autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);  // profiles
    autouvm::bench::WaitDecodeReady(d.admin.get(), c.name, absl::Seconds(120));
    autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);  // warms
    if (r.coded) {
      for (; r.warm_requests < 60; ++r.warm_requests) {
        const auto a = autouvm::bench::ModelStatusOf(d.admin.get(), c.name).execution();
        autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, 8);
        const auto b = autouvm::bench::ModelStatusOf(d.admin.get(), c.name).execution();
        const double h2d = static_cast<double>(b.h2d_bytes() - a.h2d_bytes());
        if (h2d > 0 && static_cast<double>(b.coded_bytes() - a.coded_bytes()) > 0.9 * h2d) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    }
    r.before = autouvm::bench::ModelStatusOf(d.admin.get(), c.name).execution();
    for (int i = 0; i < repeats; ++i) {
      r.runs.push_back(autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens, kLogprobs));
    }
    const auto status = autouvm::bench::ModelStatusOf(d.admin.get(), c.name);
    r.after = status.execution();
    r.graph_status = status.step_graphs();
    r.exit_code = autouvm::bench::StopDaemon(&d);
    if (!log_dir.empty()) {
      std::filesystem::create_directories(log_dir);
      std::filesystem::copy_file(dir + "/daemon.log", absl::StrCat(log_dir, "/run-", &r - runs.data(), ".log"),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }

  std::printf(
      "%s on CUDA (%s): %.2f GiB named; link measured %.1f GB/s; %d prompt tokens, %d generated, %d timed requests "
      "per run\n\n",
      c.name.c_str(), spec.name.c_str(), static_cast<double>(named) / (1 << 30), link / 1e9, prompt_len, tokens,
      repeats);
  std::printf(
      "| run | budget GiB | decode tok/s | step ms | step / plain step | H2D GB / step | of it coded | "
      "decoded / coded | decode ms / step | step / bf16 floor | tokens = resident | logprobs = resident | warm "
      "requests | staged captures / replays | capture failures | exit |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const std::vector<int32_t>& reference = runs.front().runs.front().tokens;
  const std::vector<float>& reference_logprobs = runs.front().runs.front().logprobs;
  double plain_floor_s = 0, plain_step_s = 0;  // the factor's first plain run's
  for (const Run& r : runs) {
    std::vector<double> rates;
    bool same = true, same_logprobs = true;
    for (const DaemonRun& x : r.runs) {
      rates.push_back(x.decode_tokens_per_s);
      same = same && x.tokens == reference;
      same_logprobs = same_logprobs && SameBits(x.logprobs, reference_logprobs);
    }
    const double rate = Median(rates);
    const double steps = static_cast<double>(repeats) * tokens;
    const double h2d = static_cast<double>(r.after.h2d_bytes() - r.before.h2d_bytes()) / steps;
    const double coded = static_cast<double>(r.after.coded_bytes() - r.before.coded_bytes()) / steps;
    const double decoded = static_cast<double>(r.after.decoded_bytes() - r.before.decoded_bytes()) / steps;
    const double decode_s = (r.after.decode_seconds() - r.before.decode_seconds()) / steps;
    // The floor: the weights each step streams (staged: kept as host copies) over the link's rate.
    const bool first_plain = r.factor > 0 && !r.coded && (&r == runs.data() || (&r - 1)->factor != r.factor);
    if (first_plain) plain_floor_s = static_cast<double>(r.after.staged_bytes()) / link;
    const double step_s = rate > 0 ? 1 / rate : 0;
    if (first_plain) plain_step_s = step_s;
    const auto& g = r.graph_status;
    std::printf(
        "| %s | %.2f | %.2f | %.1f | %s | %.3f | %.0f%% | %s | %s | %s | %s | %s | %d | %llu / %llu | %llu | %d |\n",
        r.what.c_str(), static_cast<double>(r.budget) / (1 << 30), rate, 1e3 * step_s,
        r.factor > 0 && !first_plain && plain_step_s > 0 ? absl::StrFormat("%.3f", step_s / plain_step_s).c_str() : "-",
        h2d / 1e9, h2d > 0 ? 100 * coded / h2d : 0.0,
        coded > 0 ? absl::StrFormat("%.3f", decoded / coded).c_str() : "-",
        coded > 0 ? absl::StrFormat("%.2f", 1e3 * decode_s).c_str() : "-",
        r.factor > 0 && plain_floor_s > 0 ? absl::StrFormat("%.3f", step_s / plain_floor_s).c_str() : "-",
        same ? "yes" : "NO", same_logprobs ? "bit for bit" : "NO", r.warm_requests,
        static_cast<unsigned long long>(g.staged_captures()), static_cast<unsigned long long>(g.staged_replays()),
        static_cast<unsigned long long>(g.capture_failures()), r.exit_code);
  }
  std::printf(
      "\nbf16 floor: the bytes the factor's first plain run streams each step (its staged weights) over the "
      "link's measured rate (%.1f GB/s); step / plain step is against that run too. H2D, coded and decode per "
      "step: counter deltas over the timed requests, as far as the backend had delivered them "
      "(bench/models_at_once.cc says how they are counted); the step and its ratios are exact. The decoder's "
      "time counts eager steps only (a graph times nothing). Staged captures / replays: the daemon's "
      "step_graphs status at the end of the run. logprobs = resident: every timed request's logprobs (each "
      "token's and its %d most likely alternatives', ids and values; Generate's `logprobs`) have the bits of the "
      "resident run's first request.\n",
      link / 1e9, kLogprobs);
  for (const Run& r : runs) {
    if (r.graph_status.capture_failures() > 0) {
      std::printf("%s: the last capture failed with: %s\n", r.what.c_str(), r.graph_status.last_error().c_str());
    }
  }
  std::filesystem::remove_all(root);
  return 0;
}
