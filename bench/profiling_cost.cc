// profiling_cost: what profiling a (model, shape) costs the requests being served, in iterations of that
// shape. Runs the shape's iterations with and without the daemon's profiler (ModelSession hooks, one
// shared Observer, ProfileJobs over RocksDB in a temporary directory): the first profiled iteration
// records, the analysis, plan and store write run on the background thread while later iterations are
// served, exactly as in autouvmd. Prints a table per trial and the medians.
//
//   build/bench/profiling_cost                                       # the embedded tiny model, decode b1
//   build/bench/profiling_cost --model-dir DIR --batch 4 --phase prefill --prompt-len 64
//   build/bench/profiling_cost --model-dir DIR --sim-gpu h200-pcie5 --oversubscription 1.5 [--sim-trace T]
//
// Extra wall time = (recorded iteration − median plain iteration) + Σ over the iterations served while
// the analysis ran of (iteration − median plain iteration). With --sim-gpu, the recording overhead and
// the analysis are also set against the simulated iteration on that GPU (its link floor, the fastest an
// iteration can be there, and stock UVM's), as for a model that does not fit the GPU. --sim-trace takes
// that iteration, and the analysis timed, from a trace autouvm-sim recorded of a big model whose CPU
// steps take seconds (too noisy to time the recording on); the recording overhead then comes from the
// model run here, which must have the same op sequence (Note [Recording overhead per op]).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_model.h"
#include "bench/bench_util.h"
#include "engine/model_config.h"
#include "profiler/analysis.h"
#include "profiler/model_session.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_key.h"
#include "profiler/profile_repository.h"
#include "profiler/profile_store.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"
#include "runtime/plan_proto.h"
#include "runtime/sim/trace_replay.h"
#include "runtime/trace_proto.h"

namespace {

using autouvm::engine::ModelRunner;
using autouvm::profiler::IterationPhase;

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using autouvm::bench::Median;

struct Trial {
  double plain = 0;     // median plain iteration, s
  double recorded = 0;  // the recorded iteration, s
  int analysing = 0;    // iterations served until the profile was ready
  double during = 0;    // their time beyond `plain` each, summed, s
  double after = 0;     // median iteration once ready (hooks only), s
  double analysis = 0;  // analysis + plan + store write, wall s (from the stored profile)
  double extra() const { return recorded - plain + during; }
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, phase = "decode", sim_gpu;
  int batch = 1, steps = 30, trials = 5;
  int64_t prompt_len = 64;
  double oversubscription = 1.5;
  CLI::App app{"Extra wall time profiling a shape costs the requests being served"};
  app.add_option("--model-dir", model_dir, "a model repository entry (default: the embedded tiny model)");
  app.add_option("--phase", phase)->check(CLI::IsMember({"decode", "prefill"}))->capture_default_str();
  app.add_option("--batch", batch, "decode rows per step")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prefill length")->capture_default_str();
  app.add_option("--steps", steps, "iterations per mode and trial")
      ->check(CLI::Range(4, 100000))
      ->capture_default_str();
  app.add_option("--trials", trials)->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--sim-gpu", sim_gpu, "also compare with the simulated iteration on this GPU spec");
  app.add_option("--oversubscription", oversubscription)->capture_default_str();
  bool record_only = false;
  app.add_flag("--record-only", record_only,
               "diagnostic: record the first iteration and drop the trace; the next two count as 'while analysing'");
  int threads = 0;
  app.add_option("--threads", threads, "libtorch intra-op threads (0: libtorch's default, one per core)");
  std::string sim_trace;
  app.add_option("--sim-trace", sim_trace, "an AccessTrace file (autouvm-sim record) to simulate and analyse");
  CLI11_PARSE(app, argc, argv);

  autouvm::runtime::Observer::MakeExecutionRepeatable();
  if (threads > 0) autouvm::engine::SetIntraOpThreads(threads);
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner;
  autouvm::engine::ModelConfig config = autouvm::engine::DefaultTinyModelConfig("tiny-llama");
  if (model_dir.empty()) {
    runner = autouvm::bench::MakeBenchRunner(config, batch);
  } else {
    auto c = autouvm::engine::LoadModelConfig(model_dir + "/model.yaml");
    if (!c.ok()) return std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str()), 1;
    config = *c;
    runner = ModelRunner::Create(model_dir, config, batch);
  }
  if (!runner.ok()) return std::fprintf(stderr, "%s\n", std::string(runner.status().message()).c_str()), 1;
  const auto dir = std::filesystem::temp_directory_path() / ("profiling-cost-" + std::to_string(getpid()));
  auto store = autouvm::profiler::OpenRocksDbProfileStore(dir.string());
  if (!store.ok()) return std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str()), 1;
  autouvm::profiler::ProfileRepository repository(store->get());
  const autouvm::runtime::GpuSpec spec = *autouvm::runtime::FindGpuSpec("h200-pcie5");
  autouvm::base::RealClock clock;
  autouvm::profiler::ProfileJobs jobs(&repository, spec, &clock);

  const IterationPhase ph = phase == "prefill" ? IterationPhase::kPrefill : IterationPhase::kDecode;
  const int rows = ph == IterationPhase::kPrefill ? 1 : batch;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len), 5);
  std::vector<float> logits;
  auto iterate = [&](autouvm::profiler::IterationHooks* hooks, int i) {
    std::vector<ModelRunner::DecodeRow> decode;
    for (int r = 0; r < rows; ++r) decode.push_back({r, 65 + (i + r) % 26, 8 + i % 64});
    if (hooks) hooks->BeforeIteration(ph, rows, prompt_len);
    const absl::Status s =
        ph == IterationPhase::kPrefill ? (*runner)->Prefill(0, prompt, 0).status() : (*runner)->Decode(decode, &logits);
    if (hooks) hooks->AfterIteration(s);
    if (!s.ok()) std::abort();
  };
  for (int i = 0; i < 5; ++i) iterate(nullptr, i);  // warm-up

  // The plan is made for the daemon's default budget, or, compared with an oversubscribed GPU, for the
  // model's weights and caches over the oversubscription (so the planner streams and schedules fetches).
  const int64_t model_bytes = (*runner)->parameter_bytes() + (*runner)->kv_cache_bytes();
  const int64_t budget = sim_gpu.empty() ? static_cast<int64_t>(0.9 * static_cast<double>(spec.memory_bytes))
                                         : static_cast<int64_t>(static_cast<double>(model_bytes) / oversubscription);
  std::vector<Trial> results;
  autouvm::v1::Profile last;
  for (int t = 0; t < trials; ++t) {
    // A new digest per trial: an unprofiled key each time.
    auto session = autouvm::profiler::ModelSession::Create(
        {absl::StrCat("bench-trial-", t, "-", getpid()), spec.name, budget, "autouvm"}, &jobs,
        (*runner)->NamedTensors());
    if (!session.ok()) return std::fprintf(stderr, "%s\n", std::string(session.status().message()).c_str()), 1;
    autouvm::profiler::ModelSession& profiler = **session;
    const auto key = profiler.Key(ph, rows, prompt_len);
    std::vector<double> plain, profiled;
    for (int i = 0; i < steps; ++i) {
      const double t0 = Now();
      iterate(nullptr, i);
      plain.push_back(Now() - t0);
    }
    // At least `steps` iterations, and on until the profile is ready: every iteration served while it
    // was being made counts.
    int ready_at = -1;
    for (int i = 0; i < steps || ready_at < 0; ++i) {
      const double t0 = Now();
      if (record_only && i == 0) {
        // Diagnostic: record through the observer and drop the trace (no analysis, no store).
        profiler.observer()->BeginIteration(autouvm::runtime::IterationMode::kRecord);
        iterate(nullptr, i);
        (void)profiler.observer()->EndIteration();
      } else {
        iterate(record_only ? nullptr : &profiler, i);
      }
      profiled.push_back(Now() - t0);
      if (record_only && i == 2) ready_at = i;
      if (ready_at < 0 && jobs.Status(key).state == autouvm::profiler::ProfileState::kReady) ready_at = i;
      if (i > 100000) {
        std::fprintf(stderr, "trial %d: the profile was not ready after %d iterations\n", t, i);
        return 1;
      }
    }
    jobs.Drain();
    Trial r;
    r.plain = Median(plain);
    r.recorded = profiled[0];
    r.analysing = ready_at;
    for (int i = 1; i <= ready_at; ++i) r.during += profiled[static_cast<size_t>(i)] - r.plain;
    r.after = Median(std::vector<double>(profiled.begin() + ready_at + 1, profiled.end()));
    auto stored = repository.Get(key);
    if (!record_only) {
      if (!stored.ok() || !stored->has_value()) return 1;
      last = **stored;
      r.analysis = last.profiling_seconds() - r.recorded;
    }
    results.push_back(r);
  }

  std::printf(
      "model: %s (%lld layers, dim %lld, %s); %s, batch %d%s; %d ops per iteration; %d trials of %d "
      "iterations per mode; %s intra-op threads\n\n",
      model_dir.empty() ? "embedded tiny-llama" : model_dir.c_str(), static_cast<long long>(config.n_layers),
      static_cast<long long>(config.dim), config.dtype.c_str(), phase.c_str(), rows,
      ph == IterationPhase::kPrefill ? absl::StrCat(", prompt ", prompt_len).c_str() : "", last.trace().ops_size(),
      trials, steps, threads > 0 ? std::to_string(threads).c_str() : "libtorch's default");
  std::printf(
      "| trial | plain ms | recorded ms | recording overhead (iterations) | analysis+store ms | iterations served "
      "while analysing | their extra ms | hooks after ready (µs / iteration) | extra wall (iterations) |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> extra_iters, extra_s, rec, ana;
  for (size_t t = 0; t < results.size(); ++t) {
    const Trial& r = results[t];
    std::printf("| %zu | %.3f | %.3f | %.2f | %.2f | %d | %.3f | %.1f | %.2f |\n", t, r.plain * 1e3, r.recorded * 1e3,
                (r.recorded - r.plain) / r.plain, r.analysis * 1e3, r.analysing, r.during * 1e3,
                (r.after - r.plain) * 1e6, r.extra() / r.plain);
    extra_iters.push_back(r.extra() / r.plain);
    extra_s.push_back(r.extra());
    rec.push_back(r.recorded - r.plain);
    ana.push_back(r.analysis);
  }
  std::printf("\nmedian extra wall time: %.2f iterations (%.3f ms); target <= 2 iterations\n", Median(extra_iters),
              Median(extra_s) * 1e3);
  if (!sim_gpu.empty()) {
    auto gpu = autouvm::runtime::FindGpuSpec(sim_gpu);
    if (!gpu.ok()) return std::fprintf(stderr, "%s\n", std::string(gpu.status().message()).c_str()), 1;
    autouvm::runtime::AccessTrace trace = autouvm::runtime::FromProto(last.trace());
    double analysis = Median(ana);
    if (!sim_trace.empty()) {
      // Note [Recording overhead per op]: what recording adds is host work per op — boxed inputs,
      // identities, sizes — independent of the tensors' sizes; the model run here has the trace's op
      // sequence with small tensors, so its iterations are short enough to time the overhead on.
      autouvm::v1::AccessTrace proto;
      std::ifstream in(sim_trace, std::ios::binary);
      if (!proto.ParseFromIstream(&in)) return std::fprintf(stderr, "%s: not an AccessTrace\n", sim_trace.c_str()), 1;
      trace = autouvm::runtime::FromProto(proto);
      std::vector<std::string> big, here;
      for (const auto& op : trace.ops) big.push_back(op.kernel);
      for (const auto& op : last.trace().ops()) here.push_back(op.kernel());
      std::printf("\n%s: %zu ops; the model run here: %zu ops, %s sequence\n", sim_trace.c_str(), big.size(),
                  here.size(), big == here ? "the same" : "a DIFFERENT");
      if (big != here) return 1;
      // The analysis as the worker runs it (analysis, plan, one store write), on the big trace.
      int64_t footprint = 0;
      for (const auto& n : trace.named) footprint += n.bytes;
      std::vector<double> times;
      for (int t = 0; t < trials; ++t) {
        const auto key = autouvm::profiler::DecodeKey(absl::StrCat("sim-trace-", t), 1, spec.name,
                                                      static_cast<int64_t>(footprint / oversubscription), "autouvm");
        const double t0 = Now();
        autouvm::profiler::Analysis a = autouvm::profiler::Analyze(key, trace, spec, clock.Now());
        if (!repository.Put(a.profile, autouvm::runtime::ToProto(a.plan, key).SerializeAsString()).ok()) return 1;
        times.push_back(Now() - t0);
        if (t == 0) {
          std::printf("its plan at %.2fx: %lld of %lld tensor bytes pinned, %lld streamed per iteration, %zu fetches\n",
                      oversubscription, static_cast<long long>(a.plan.pinned_bytes),
                      static_cast<long long>(a.profile.bytes_per_iteration()),
                      static_cast<long long>(a.plan.streamed_bytes), a.plan.prefetches.size());
        }
      }
      analysis = Median(times);
    }
    auto report = autouvm::runtime::sim::ReplayTrace(trace, *gpu, {.oversubscription = oversubscription});
    if (!report.ok()) return std::fprintf(stderr, "%s\n", std::string(report.status().message()).c_str()), 1;
    const double floor = report->link_floor_seconds, stock = report->iterations.back().seconds;
    // On the GPU the recording overhead is host time added to the serving thread; the analysis runs on
    // another thread at low priority, so it costs serving nothing unless cores are short: both are
    // counted here in full.
    const double cost = Median(rec) + analysis;
    std::printf(
        "\nsimulated on %s at %.2fx oversubscription: link floor %.2f ms, stock UVM %.2f ms per iteration\n"
        "recording overhead %.2f ms + analysis %.2f ms (counted as if on the serving core) = %.2f ms = %.3f "
        "iterations at the link floor, %.4f of stock UVM's\n",
        sim_gpu.c_str(), oversubscription, floor * 1e3, stock * 1e3, Median(rec) * 1e3, analysis * 1e3, cost * 1e3,
        cost / floor, cost / stock);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
