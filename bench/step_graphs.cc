// step_graphs (GPU host): issue 29's decode steps run as CUDA graphs (runtime.cuda_graphs, Note
// [Captured steps] in engine/step_graphs.cc) against the same daemon stepping eagerly, side by side in
// one run, through the daemon and a gRPC client, with the greedy tokens of both compared.
//
//   build-gpu/bench/step_graphs --preset 7b --factors 1.0 --batches 1,16
//
// One Llama entry (weights generated on the GPU at load); per factor (named bytes / device budget; 1.0:
// the weights and the KV cache resident, with room for the activations) a daemon with graphs off, then
// one with them on. Per daemon: a request profiles, one warms; per batch B, two untimed bursts of B
// streams started at once (they record and plan the bucket and capture its graphs), then --repeats
// timed bursts. Per burst: each stream's decode rate (its step: one token per step) and the burst's
// aggregate tokens/s. The HBM roof is the weights' bytes over the card's bandwidth measured here
// (bench/sized_entry.h); issue 29's targets at factor 1.0: batch 1 <= 1.5 x the roof, batch 16 <= 2 x.
// Above factor 1.0 the graphs-on daemon captures the passes that stream weights with their plan's copies
// (Note [Staged passes captured], runtime/executor_capture.cc: the "staged" column); the targets there:
// the step >= 0.9 of its floor at 1.1 and 1.25, no slower than eager at 1.5 and 2.0.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/decode_harness.h"
#include "bench/sized_entry.h"
#include "engine/model_runner.h"
#include "runtime/compute_device.h"
#include "runtime/gpu_spec.h"

namespace {

using autouvm::bench::Check;
using autouvm::bench::DaemonRun;
using autouvm::bench::Median;

struct Burst {
  std::vector<DaemonRun> runs;
  double aggregate = 0;  // tokens/s over the burst
  // How the daemon stepped it: its passes and their rows by kind (GetModelStatus before and after). Two
  // bursts of the same signature ran the same step shapes, all but certainly: a burst whose streams
  // arrived in two groups was prefilled in two passes, and bf16 results depend on the batch's shape.
  std::vector<uint64_t> signature;
};

std::vector<uint64_t> StepCounts(const autouvm::v1::ModelStatus& s) {
  return {s.prefill_passes_total(), s.prefill_rows_total(), s.mixed_passes_total(), s.decode_steps_total(),
          s.decode_rows_total()};
}

struct Cell {
  double factor = 0;
  bool graphs = false;
  int batch = 0;
  std::vector<Burst> bursts;
  std::vector<Burst> untimed;  // the bursts before the timed ones: their tokens pair too
  autouvm::v1::StepGraphStatus graph_status;
  autouvm::v1::ExecutionStatus before, after;  // around the timed bursts
  int exit_code = 0;
};

// Whether each stream of `mine`'s bursts (timed or not) gave one of the token sequences that `theirs`'
// bursts of the same steps (Burst::signature) gave (a batch's rows may differ from each other: every
// request is greedy); a burst is never compared with itself.
std::string CompareTokens(const Cell& mine, const Cell& theirs) {
  int differing = 0, compared = 0, paired = 0, bursts = 0;
  size_t earliest = SIZE_MAX;  // of the differing streams, the first token where the closest other one parts
  for (const std::vector<Burst>* list : {&mine.untimed, &mine.bursts}) {
    for (const Burst& b : *list) {
      ++bursts;
      std::vector<std::vector<int32_t>> sequences;  // the other bursts' of the same steps
      for (const std::vector<Burst>* others : {&theirs.untimed, &theirs.bursts}) {
        for (const Burst& e : *others) {
          if (&e == &b || e.signature != b.signature) continue;
          for (const DaemonRun& r : e.runs) sequences.push_back(r.tokens);
        }
      }
      if (sequences.empty()) continue;
      ++paired;
      for (const DaemonRun& r : b.runs) {
        ++compared;
        if (std::find(sequences.begin(), sequences.end(), r.tokens) != sequences.end()) continue;
        ++differing;
        size_t common = 0;
        for (const std::vector<int32_t>& e : sequences) {
          size_t k = 0;
          while (k < e.size() && k < r.tokens.size() && e[k] == r.tokens[k]) ++k;
          common = std::max(common, k);
        }
        earliest = std::min(earliest, common);
      }
    }
  }
  if (paired == 0) return absl::StrFormat("none of %d bursts paired", bursts);
  if (differing == 0) return absl::StrFormat("yes (%d of %d bursts paired)", paired, bursts);
  return absl::StrFormat("NO: %d of %d, from token %d (%d of %d bursts paired)", differing, compared, earliest, paired,
                         bursts);
}

// The daemon's device budget at `factor` (named bytes / budget). Resident: the named bytes and room for the
// activations (the planner sets it aside from the budget).
int64_t BudgetAt(double factor, int64_t named_bytes) {
  return factor <= 1.0 ? named_bytes + (int64_t{4} << 30)
                       : static_cast<int64_t>(static_cast<double>(named_bytes) / factor);
}

// The layer code the daemon's rebuilt module runs (engine/model_runner.cc's choice; Note [Own layer kernels]).
std::string LayerKernelsNamed() {
  const char* env = std::getenv("AUTOUVM_LAYER_KERNELS");
  if (env != nullptr && *env != '\0') return absl::StrCat(env, " (AUTOUVM_LAYER_KERNELS)");
  return "the default (own where the shape allows)";
}

Burst RunBurst(autouvm::bench::DaemonUnderTest& d, const std::string& model, const std::vector<int32_t>& prompt,
               int batch, int tokens) {
  Burst b;
  const std::vector<uint64_t> before = StepCounts(autouvm::bench::ModelStatusOf(d.admin.get(), model));
  b.runs.resize(static_cast<size_t>(batch));
  std::vector<std::thread> threads;
  for (int i = 0; i < batch; ++i) {
    threads.emplace_back([&, i] {
      b.runs[static_cast<size_t>(i)] = autouvm::bench::GenerateThroughDaemon(d.generation.get(), model, prompt, tokens);
    });
  }
  for (std::thread& t : threads) t.join();
  auto first = b.runs.front().first_token, last = b.runs.front().last_token;
  int64_t generated = 0;
  for (const DaemonRun& r : b.runs) {
    first = std::min(first, r.first_token);
    last = std::max(last, r.last_token);
    generated += static_cast<int64_t>(r.tokens.size()) - 1;
  }
  const double seconds = std::chrono::duration<double>(last - first).count();
  b.aggregate = seconds > 0 ? static_cast<double>(generated) / seconds : 0;
  b.signature = StepCounts(autouvm::bench::ModelStatusOf(d.admin.get(), model));
  for (size_t i = 0; i < before.size(); ++i) b.signature[i] -= before[i];
  return b;
}

// The engine alone, no daemon: `steps` decode steps of `batch` rows through a ModelRunner on the GPU, eager
// then by graphs (one runner; its weights as the daemon loads them), in a child process. Nanoseconds per
// step, eager and by graphs.
std::pair<int64_t, int64_t> BareStepNs(const autouvm::engine::ModelConfig& c, const std::string& repo,
                                       const autouvm::runtime::GpuSpec& spec, int batch, int max_batch,
                                       const std::vector<int32_t>& prompt, int steps) {
  return autouvm::bench::InChild([&] {
    auto device = Check(autouvm::runtime::OpenComputeDevice({.backend = "cuda", .spec = spec}), "CUDA");
    // Each slot's blocks hold a whole sequence (the daemon's pool is sized by the same max_seq).
    auto runner = Check(autouvm::engine::ModelRunner::Create(repo + "/" + c.name, c, max_batch, device.get(),
                                                             {.tokens = max_batch * (c.max_seq + 16)}),
                        "load");
    const auto len = static_cast<int64_t>(prompt.size());
    auto time = [&](bool graphs) {
      Check(runner->EnableStepGraphs(
                {.mode = graphs ? autouvm::engine::StepGraphMode::kDevice : autouvm::engine::StepGraphMode::kOff}),
            "graphs");
      for (int32_t slot = 0; slot < batch; ++slot) Check(runner->Prefill(slot, prompt), "prefill");
      std::vector<float> logits;
      std::chrono::steady_clock::time_point began;
      for (int step = -3; step < steps; ++step) {  // 3 untimed: the first captures
        if (step == 0) began = std::chrono::steady_clock::now();
        std::vector<autouvm::engine::ModelRunner::DecodeRow> rows;
        for (int32_t slot = 0; slot < batch; ++slot) rows.push_back({slot, 100 + slot, len + 3 + step});
        Check(runner->Decode(rows, &logits), "decode");
      }
      const auto took = std::chrono::steady_clock::now() - began;
      for (int32_t slot = 0; slot < batch; ++slot) runner->Release(slot);
      return std::chrono::duration_cast<std::chrono::nanoseconds>(took).count() / steps;
    };
    const int64_t eager = time(false);
    return std::pair<int64_t, int64_t>{eager, time(true)};
  });
}

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "step_graphs";
  CLI::App app{"step_graphs: decode steps as CUDA graphs against eager steps, through the daemon (GPU host)"};
  std::string preset = "7b", factors_flag = "1.0", batches_flag = "1,16";
  int tokens = 64, prompt_len = 16, repeats = 2;
  std::string daemon_path = AUTOUVMD_PATH, log_dir;
  app.add_option("--log-dir", log_dir, "keep each daemon's log (--log-level debug: a line per pass) here");
  app.add_option("--preset", preset, "7b, 13b or small");
  app.add_option("--factors", factors_flag, "oversubscription factors: named bytes / device budget (1.0: resident)");
  app.add_option("--batches", batches_flag, "streams started at once");
  app.add_option("--tokens", tokens, "tokens generated per request");
  app.add_option("--prompt", prompt_len, "prompt tokens");
  app.add_option("--repeats", repeats, "timed bursts per batch");
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  bool streaming = true;
  app.add_option("--streaming", streaming,
                 "the graphs' daemon captures the steps that stream weights too (runtime.cuda_graphs_streaming)");
  CLI11_PARSE(app, argc, argv);

  std::vector<int> batches;
  for (const std::string& b : std::vector<std::string>(absl::StrSplit(batches_flag, ',')))
    batches.push_back(std::stoi(b));
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const std::string root = absl::StrCat(std::filesystem::temp_directory_path().string(), "/step-graphs-", getpid());
  const std::string repo = root + "/models";
  const auto spec = Check(autouvm::runtime::FindGpuSpec("h200-pcie5"), "spec");
  autouvm::engine::ModelConfig c = Check(autouvm::bench::LlamaConfig(preset, 7, prompt_len + tokens + 8), "config");
  c.name = absl::StrCat("bench-", preset);
  // Sized, and the bandwidth measured, in child processes (bench/sized_entry.h): the bench holds nothing on
  // the card.
  const autouvm::bench::EntrySize size = autouvm::bench::WriteSizedEntry(c, repo, max_batch, spec);
  c.module = "autouvm";  // as model.yaml says, so that the engine alone runs the daemon's layer code
  const double hbm = autouvm::bench::MeasureHbmBytesPerS(spec);
  const double roof_s = static_cast<double>(size.weight_bytes) / hbm;
  const double link = autouvm::bench::MeasureLinkBytesPerS(spec);
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len);
  std::vector<std::pair<int64_t, int64_t>> bare;  // per batch: ns per step, eager and by graphs
  for (const int batch : batches) bare.push_back(BareStepNs(c, repo, spec, batch, max_batch, prompt, tokens));
  // The same engine running model.pt's own (portable) code, for the layer kernels' part (Note [Layer kernels]).
  std::vector<std::pair<int64_t, int64_t>> bare_saved;
  autouvm::engine::ModelConfig saved = c;
  saved.module.clear();
  for (const int batch : batches) {
    bare_saved.push_back(BareStepNs(saved, repo, spec, batch, max_batch, prompt, tokens));
  }
  std::vector<Cell> cells;
  for (const std::string& f : std::vector<std::string>(absl::StrSplit(factors_flag, ','))) {
    const double factor = std::stod(f);
    // Resident: the named bytes and room for the activations (the planner sets it aside from the budget).
    const int64_t budget = BudgetAt(factor, size.named_bytes);
    for (const bool graphs : {false, true}) {
      const std::string dir = absl::StrCat(root, "/run-", cells.size());
      std::filesystem::create_directories(dir);
      const std::string config = autouvm::bench::WriteCudaDaemonConfig(
          dir, repo, spec.name,
          absl::StrCat("models: {", c.name, ": {max_batch: ", max_batch, ", policy: autouvm, device_budget: ", budget,
                       "}}"),
          absl::StrCat("cuda_graphs: ", graphs ? "true" : "false",
                       ", cuda_graphs_streaming: ", graphs && streaming ? "true" : "false"));
      autouvm::bench::DaemonUnderTest d = autouvm::bench::StartDaemon(
          daemon_path, config, dir,
          log_dir.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--log-level", "debug"});
      autouvm::bench::WaitModelReady(d, c.name);
      autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);  // profiles
      autouvm::bench::WaitDecodeReady(d.admin.get(), c.name, absl::Seconds(120));
      autouvm::bench::GenerateThroughDaemon(d.generation.get(), c.name, prompt, tokens);  // warms
      const size_t first_cell = cells.size();
      for (const int batch : batches) {
        Cell cell{.factor = factor, .graphs = graphs, .batch = batch};
        for (int i = 0; i < 2; ++i) {  // records, plans, captures
          cell.untimed.push_back(RunBurst(d, c.name, prompt, batch, tokens));
        }
        cell.before = autouvm::bench::ModelStatusOf(d.admin.get(), c.name).execution();
        for (int i = 0; i < repeats; ++i) cell.bursts.push_back(RunBurst(d, c.name, prompt, batch, tokens));
        const autouvm::v1::ModelStatus after = autouvm::bench::ModelStatusOf(d.admin.get(), c.name);
        cell.graph_status = after.step_graphs();
        cell.after = after.execution();
        cells.push_back(std::move(cell));
      }
      const int exit_code = autouvm::bench::StopDaemon(&d);
      if (!log_dir.empty()) {
        std::filesystem::create_directories(log_dir);
        std::filesystem::copy_file(dir + "/daemon.log",
                                   absl::StrCat(log_dir, "/factor-", f, graphs ? "-graphs" : "-eager", ".log"),
                                   std::filesystem::copy_options::overwrite_existing);
      }
      for (size_t i = first_cell; i < cells.size(); ++i) cells[i].exit_code = exit_code;
    }
  }

  std::printf(
      "%s on CUDA (%s): %.2f GiB of weights, %.2f GiB named (KV cache for %d streams); HBM measured %.0f GB/s, the "
      "weights' roof %.2f ms; link measured %.1f GB/s; %d prompt tokens, %d generated, %d timed bursts per batch; "
      "layer kernels: %s\n\n",
      c.name.c_str(), spec.name.c_str(), static_cast<double>(size.weight_bytes) / (1 << 30),
      static_cast<double>(size.named_bytes) / (1 << 30), max_batch, hbm / 1e9, 1e3 * roof_s, link / 1e9, prompt_len,
      tokens, repeats, LayerKernelsNamed().c_str());
  std::printf(
      "Streamed: the weights the plan keeps as host copies (staged). H2D per pass: the timed bursts' host-to-device "
      "bytes over their passes (%d a burst, prefill and mixed ones included); in place per pass: the weights the "
      "GPU read from host memory over the link, likewise (pinned weights displaced by KV rows). The floor: "
      "max(HBM roof, (H2D + in place) per pass / the link).\n\n"
      "| factor | graphs | batch | step ms | step / HBM roof | streamed GiB | H2D GB / pass | in place GB / pass "
      "| floor ms | floor / step | "
      "step / eager step | aggregate tok/s | TTFT ms | tokens = eager | replays | captures (again) | staged: captured "
      "/ "
      "replayed | packed: captured / replayed | failures | capture ms | graphs' MiB | exit |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      tokens + 1);
  for (const Cell& cell : cells) {
    std::vector<double> steps, aggregates, ttfts;
    for (const Burst& b : cell.bursts) {
      aggregates.push_back(b.aggregate);
      for (const DaemonRun& r : b.runs) {
        if (r.decode_tokens_per_s > 0) steps.push_back(1 / r.decode_tokens_per_s);
        ttfts.push_back(r.ttft_ms);
      }
    }
    const double step_s = Median(steps);
    // The eager daemon's run of the same factor and batch: its step, and whether each of this run's token
    // sequences is one of its (a batch's rows may differ from each other: every request is greedy), compared
    // burst by burst with the eager bursts (timed or not) that ran in the same steps (Burst::signature).
    double eager_s = 0;
    std::string same = "-";
    for (const Cell& other : cells) {
      if (other.graphs || other.factor != cell.factor || other.batch != cell.batch) continue;
      std::vector<double> s;
      for (const Burst& b : other.bursts) {
        for (const DaemonRun& r : b.runs)
          if (r.decode_tokens_per_s > 0) s.push_back(1 / r.decode_tokens_per_s);
      }
      eager_s = Median(s);
      if (!cell.graphs) break;
      same = CompareTokens(cell, other) + "; among its own: " + CompareTokens(cell, cell);
    }
    // The control: the eager daemon's bursts against its other bursts of the same steps. A difference
    // there is the pairing's (steps the signature does not tell apart), not the graphs'.
    if (!cell.graphs) same = "control: " + CompareTokens(cell, cell);
    const auto& g = cell.graph_status;
    const double streamed = static_cast<double>(cell.after.staged_bytes());
    const double passes = static_cast<double>(cell.bursts.size()) * (tokens + 1);
    const double h2d_per_pass = static_cast<double>(cell.after.h2d_bytes() - cell.before.h2d_bytes()) / passes;
    const double in_place_per_pass =
        static_cast<double>(cell.after.in_place_read_bytes() - cell.before.in_place_read_bytes()) / passes;
    const double floor_s = std::max(roof_s, (h2d_per_pass + in_place_per_pass) / link);
    std::printf(
        "| %.2f | %s | %d | %.2f | %.2f | %.2f | %.3f | %.3f | %.2f | %.3f | %s | %.1f | %.1f | %s | %llu | %llu "
        "(%llu) "
        "| %llu / %llu | %llu / %llu | %llu | %.0f | %.0f | %d |\n",
        cell.factor, cell.graphs ? "on" : "off", cell.batch, 1e3 * step_s, step_s / roof_s, streamed / (1 << 30),
        h2d_per_pass / 1e9, in_place_per_pass / 1e9, 1e3 * floor_s, floor_s / step_s,
        cell.graphs && eager_s > 0 ? absl::StrFormat("%.3f", step_s / eager_s).c_str() : "-", Median(aggregates),
        Median(ttfts), same.c_str(), static_cast<unsigned long long>(g.replays()),
        static_cast<unsigned long long>(g.captures()), static_cast<unsigned long long>(g.recaptures()),
        static_cast<unsigned long long>(g.staged_captures()), static_cast<unsigned long long>(g.staged_replays()),
        static_cast<unsigned long long>(g.packed_captures()), static_cast<unsigned long long>(g.packed_replays()),
        static_cast<unsigned long long>(g.capture_failures()), 1e3 * g.capture_seconds(),
        static_cast<double>(g.bytes()) / (1 << 20), cell.exit_code);
  }
  std::printf(
      "\nThe engine alone (a ModelRunner in a child process, no daemon, %d decode steps, host packing and the "
      "logits' copy back included; the last two columns with model.pt's code as saved, the portable layer "
      "kernels):\n\n| batch | eager step ms | graph step ms | graph / eager | graph / HBM roof | eager, as saved | "
      "graph, as saved |\n|---|---|---|---|---|---|---|\n",
      tokens);
  for (size_t i = 0; i < batches.size(); ++i) {
    const double eager_s = static_cast<double>(bare[i].first) / 1e9,
                 graph_s = static_cast<double>(bare[i].second) / 1e9;
    std::printf("| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f |\n", batches[i], 1e3 * eager_s, 1e3 * graph_s,
                graph_s / eager_s, graph_s / roof_s, static_cast<double>(bare_saved[i].first) / 1e6,
                static_cast<double>(bare_saved[i].second) / 1e6);
  }
  std::printf(
      "\nstep: the median over the timed bursts' streams of 1 / the stream's decode rate (tokens 2..N at the "
      "client); TTFT: the median of their first tokens' times (the burst's prompts prefilled in one packed step, "
      "which graphs capture from its bucket's second step: packed); replays, captures (in brackets, those of a bucket "
      "captured before: recaptures) and the graphs' "
      "memory: the daemon's GetModelStatus after that batch's bursts "
      "(cumulative over the daemon's life). tokens = eager: each stream's greedy tokens are one of the sequences "
      "the eager daemon's streams gave in a burst of the same steps (the same passes and rows by kind, read from "
      "GetModelStatus around each burst, untimed bursts included); a burst no eager burst matches is not "
      "compared. In the eager rows, the control: each eager burst against the eager daemon's other bursts of the "
      "same steps.\n");
  std::filesystem::remove_all(root);
  return 0;
}
