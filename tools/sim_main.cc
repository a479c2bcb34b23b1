// autouvm-sim: records the access trace of a model's iteration on the CPU, and replays traces on the
// simulated UVM backend under a policy, GPU specs and device capacities (docs/autouvm-sim.md).
//
//   autouvm-sim record --model models/llama --batch 1 --out decode.trace
//   autouvm-sim replay --trace decode.trace --gpu rtx3060-pcie4,h200-pcie5 --oversubscription 1,1.5,2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autouvm/v1/profile.pb.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "engine/model_config.h"
#include "engine/model_runner.h"
#include "profiler/analysis.h"
#include "profiler/profile_key.h"
#include "runtime/gpu_spec.h"
#include "runtime/observer.h"
#include "runtime/sim/trace_replay.h"
#include "runtime/trace_proto.h"

namespace {

using autouvm::runtime::AccessTrace;
using autouvm::runtime::GpuSpec;
using autouvm::runtime::MigrationCause;

struct RecordArgs {
  std::string model;
  int batch = 1;
  int prompt_len = 8;
  std::string phase = "decode";
  std::string out;
};

absl::Status Record(const RecordArgs& a) {
  autouvm::runtime::Observer::MakeExecutionRepeatable();
  ASSIGN_OR_RETURN(auto config, autouvm::engine::LoadModelConfig(a.model + "/model.yaml"));
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto runner, autouvm::engine::ModelRunner::Create(a.model, config, a.batch));
  ASSIGN_OR_RETURN(auto observer, autouvm::runtime::Observer::Create());
  runner->NameTensors(observer.get());
  std::vector<int32_t> prompt;
  for (int i = 0; i < a.prompt_len; ++i) prompt.push_back(static_cast<int32_t>((i * 7 + 3) % config.vocab_size));
  AccessTrace trace;
  if (a.phase == "prefill") {
    RETURN_IF_ERROR(runner->Prefill(0, prompt).status());  // once unrecorded: the executor settles
    observer->BeginIteration();
    auto logits = runner->Prefill(0, prompt);
    trace = observer->EndIteration();
    RETURN_IF_ERROR(logits.status());
  } else {
    std::vector<autouvm::engine::ModelRunner::DecodeRow> rows;
    for (int s = 0; s < a.batch; ++s) {
      RETURN_IF_ERROR(runner->Prefill(s, prompt).status());
      rows.push_back({s, prompt.back(), a.prompt_len});
    }
    std::vector<float> logits;
    RETURN_IF_ERROR(runner->Decode(rows, &logits));  // once unrecorded
    for (auto& r : rows) ++r.pos;
    observer->BeginIteration();
    absl::Status decoded = runner->Decode(rows, &logits);
    trace = observer->EndIteration();
    RETURN_IF_ERROR(decoded);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ofstream out(a.out, std::ios::binary);
  if (!out || !autouvm::runtime::ToProto(trace).SerializeToOstream(&out)) {
    return absl::UnavailableError(a.out + ": cannot write the trace");
  }
  int64_t named = 0;
  for (const auto& n : trace.named) named += n.bytes;
  std::printf("recorded %s of %s (batch %d, prompt %d): %zu ops, %zu named tensors (%.2f GiB), %.1f s\n",
              a.phase.c_str(), config.name.c_str(), a.batch, a.prompt_len, trace.ops.size(), trace.named.size(),
              static_cast<double>(named) / (1 << 30), seconds);
  return absl::OkStatus();
}

struct ReplayArgs {
  std::string trace;
  std::vector<std::string> gpus = {"h200-pcie5"};
  std::string gpu_specs;
  std::vector<double> oversubscription = {1.0};
  double device_gib = 0;
  std::string policy = "stock";
  int iterations = 3;
  int top_ops = 0;
  int show_plan = 0;
  bool emulated_eviction = false;
  double coded_ratio = 0;
  double decode_gb_per_s = 0;
};

// The `n` ops that took longest in the steady iteration, with their share of it.
void PrintTopOps(const AccessTrace& trace, const autouvm::runtime::sim::ReplayReport& r, const std::string& label,
                 int n) {
  std::vector<size_t> order(r.op_seconds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.op_seconds[a] > r.op_seconds[b]; });
  double total = 0;
  for (double s : r.op_seconds) total += s;
  std::printf("\nslowest ops of the steady iteration, %s:\n\n| op | kernel | ms | share |\n|---|---|---|---|\n",
              label.c_str());
  for (size_t k = 0; k < order.size() && k < static_cast<size_t>(n); ++k) {
    const size_t i = order[k];
    std::printf("| %zu | %s | %.3f | %.1f%% |\n", i, trace.ops[i].kernel.c_str(), 1e3 * r.op_seconds[i],
                100 * r.op_seconds[i] / total);
  }
}

absl::StatusOr<AccessTrace> ReadTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open the trace");
  autouvm::v1::AccessTrace proto;
  if (!proto.ParseFromIstream(&in)) return absl::InvalidArgumentError(path + ": not an AccessTrace protobuf");
  if (proto.ops_size() == 0) return absl::InvalidArgumentError(path + ": the trace has no ops");
  return autouvm::runtime::FromProto(proto);
}

absl::StatusOr<GpuSpec> FindSpec(const std::string& name, const std::vector<GpuSpec>& extra) {
  for (const GpuSpec& s : extra) {
    if (s.name == name) return s;
  }
  return autouvm::runtime::FindGpuSpec(name);
}

double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// What the plan a replay followed keeps and moves: its partition and the `n` tensors it fetches the
// most bytes of per iteration.
void PrintPlan(const AccessTrace& trace, const autouvm::runtime::Plan& plan, const std::string& label, int n) {
  std::printf(
      "\nplan, %s: budget %.2f GiB, window %.2f GiB; pinned %.2f GiB (%zu tensors), read in place %.2f GiB (%zu), "
      "streamed %.2f GiB per iteration in %zu fetches%s\n",
      label.c_str(), GiB(plan.budget_bytes), GiB(plan.window_bytes), GiB(plan.pinned_bytes), plan.pinned.size(),
      GiB(plan.remote_bytes), plan.remote.size(), GiB(plan.streamed_bytes), plan.prefetches.size(),
      plan.staged ? (plan.device_buffer ? ", staged through a device buffer" : ", staged") : "");
  std::map<std::string, std::pair<int, int64_t>> fetched;  // id → fetches, bytes
  for (const autouvm::runtime::Prefetch& f : plan.prefetches) {
    for (const std::string& id : f.tensors) ++fetched[id].first;
  }
  std::vector<std::pair<std::string, int>> order(fetched.size());
  std::transform(fetched.begin(), fetched.end(), order.begin(), [](const auto& kv) {
    return std::pair<std::string, int>{kv.first, kv.second.first};
  });
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  // Each tensor's size and its first reader, from the trace.
  std::map<std::string, std::pair<int64_t, std::string>> seen;
  for (const autouvm::runtime::OpRecord& op : trace.ops) {
    for (const auto* uses : {&op.reads, &op.writes}) {
      for (const autouvm::runtime::TensorUse& u : *uses) {
        auto [it, fresh] = seen.try_emplace(u.id, u.span(), op.kernel);
        if (!fresh) it->second.first = std::max(it->second.first, u.span());
      }
    }
  }
  if (!order.empty()) std::printf("\n| tensor | MiB | fetches per iteration | first used by |\n|---|---|---|---|\n");
  for (size_t i = 0; i < order.size() && static_cast<int>(i) < n; ++i) {
    const auto it = seen.find(order[i].first);
    std::printf("| %s | %.2f | %d | %s |\n", order[i].first.c_str(),
                it == seen.end() ? 0.0 : static_cast<double>(it->second.first) / (1 << 20), order[i].second,
                it == seen.end() ? "-" : it->second.second.c_str());
  }
}

absl::Status Replay(const ReplayArgs& a) {
  ASSIGN_OR_RETURN(AccessTrace trace, ReadTrace(a.trace));
  std::vector<GpuSpec> extra;
  if (!a.gpu_specs.empty()) {
    ASSIGN_OR_RETURN(std::string text, autouvm::base::ReadTextFile(a.gpu_specs, "GPU specs"));
    ASSIGN_OR_RETURN(extra, autouvm::runtime::ParseGpuSpecs(text));
  }
  std::printf("trace %s: %zu ops; policy %s; %d iterations, the first from a cold device; steady = the last\n\n",
              a.trace.c_str(), trace.ops.size(), a.policy.c_str(), a.iterations);
  std::printf(
      "| GPU | oversub | footprint GiB | device GiB | resident ms | link floor ms | iterations ms | steady ms |"
      " steady / floor | H2D fault GiB | H2D driver-prefetch GiB | D2H eviction GiB | faults | fault groups |"
      " evictions | thrashing | fault stall ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, autouvm::runtime::sim::ReplayReport>> reports;
  for (const std::string& name : a.gpus) {
    ASSIGN_OR_RETURN(GpuSpec spec, FindSpec(name, extra));
    std::vector<double> factors = a.oversubscription;
    if (a.device_gib > 0) factors = {0};
    for (double factor : factors) {
      autouvm::runtime::sim::ReplayOptions options{.policy = a.policy,
                                                   .oversubscription = factor,
                                                   .device_bytes = static_cast<int64_t>(a.device_gib * (1 << 30)),
                                                   .iterations = a.iterations,
                                                   .coded_ratio = a.coded_ratio};
      if (a.decode_gb_per_s > 0) spec.decode_bytes_per_s = a.decode_gb_per_s * 1e9;
      if (a.emulated_eviction && factor > 1.0) {
        // As bench/offload_bench on the GPU: the named tensors' bytes / factor, the driver emulated.
        int64_t named = 0;
        for (const auto& n : trace.named) named += n.bytes;
        options.emulated_eviction_budget = static_cast<int64_t>(static_cast<double>(named) / factor);
      }
      // `paper`, `autouvm`: the profiler's plan for this trace, made for the capacity the replay runs with.
      autouvm::runtime::Plan followed;
      options.make_plan = [&trace, &spec, &a, &followed](int64_t device_bytes) {
        const auto key = autouvm::profiler::DecodeKey("replay", 1, spec.name, device_bytes, a.policy);
        followed = autouvm::profiler::Analyze(key, trace, spec, absl::Now()).plan;
        return followed;
      };
      ASSIGN_OR_RETURN(auto r, autouvm::runtime::sim::ReplayTrace(trace, spec, options));
      const auto& last = r.iterations.back();
      const auto& m = last.moved;
      const double over = static_cast<double>(r.footprint_bytes) / static_cast<double>(r.device_bytes);
      std::string each;
      for (const auto& it : r.iterations)
        absl::StrAppendFormat(&each, "%s%.2f", each.empty() ? "" : " / ", 1e3 * it.seconds);
      std::printf(
          "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.2f | %.2fx | %.2f | %.2f | %.2f | %lld | %lld | %lld |"
          " %lld | %.2f |\n",
          spec.name.c_str(), over, GiB(r.footprint_bytes), GiB(r.device_bytes), 1e3 * r.resident_seconds,
          1e3 * r.link_floor_seconds, each.c_str(), 1e3 * last.seconds, last.seconds / r.link_floor_seconds,
          GiB(m.h2d(MigrationCause::kFault)), GiB(m.h2d(MigrationCause::kDriverPrefetch)),
          GiB(m.d2h(MigrationCause::kEviction)), static_cast<long long>(m.gpu_faults),
          static_cast<long long>(m.gpu_fault_groups), static_cast<long long>(m.evictions),
          static_cast<long long>(m.thrashing), 1e3 * last.fault_seconds);
      if (a.show_plan > 0 && a.policy != "stock") {
        PrintPlan(trace, followed, absl::StrFormat("%s at %.2fx", spec.name, over), a.show_plan);
      }
      if (a.top_ops > 0) reports.push_back({absl::StrFormat("%s at %.2fx", spec.name, over), std::move(r)});
    }
  }
  for (const auto& [label, r] : reports) PrintTopOps(trace, r, label, a.top_ops);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Record a model's access trace on the CPU; replay traces on the simulated UVM backend"};
  app.require_subcommand(1);
  RecordArgs rec;
  CLI::App* record = app.add_subcommand("record", "record one iteration's AccessTrace of a model entry");
  record->add_option("--model", rec.model, "model entry directory (model.pt + model.yaml)")->required();
  record->add_option("--batch", rec.batch, "decode rows (KV slots)")->check(CLI::Range(1, 4096))->capture_default_str();
  record->add_option("--prompt-len", rec.prompt_len, "prompt tokens before the recorded step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  record->add_option("--phase", rec.phase)->check(CLI::IsMember({"decode", "prefill"}))->capture_default_str();
  record->add_option("--out", rec.out, "trace file to write (AccessTrace protobuf)")->required();
  ReplayArgs rep;
  CLI::App* replay = app.add_subcommand("replay", "replay a trace on the simulated backend");
  replay->add_option("--trace", rep.trace, "trace file from `record`")->required();
  replay->add_option("--gpu", rep.gpus, "GPU specs by name, comma-separated")->delimiter(',')->capture_default_str();
  replay->add_option("--gpu-specs", rep.gpu_specs, "YAML file with more GPU specs (docs/gpu-specs.md)");
  replay->add_option("--oversubscription", rep.oversubscription, "footprint / device capacity, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  replay->add_option("--device-gib", rep.device_gib, "device capacity in GiB (instead of --oversubscription)")
      ->check(CLI::Range(0.001, 1e6));
  replay->add_option("--policy", rep.policy)->capture_default_str();
  replay->add_option("--iterations", rep.iterations)->check(CLI::Range(1, 1000))->capture_default_str();
  replay->add_flag("--emulated-eviction", rep.emulated_eviction,
                   "stock and paper: emulate the driver's eviction at op boundaries under the named bytes / "
                   "oversubscription, as bench/offload_bench does on the GPU");
  replay
      ->add_option("--coded-ratio", rep.coded_ratio,
                   "staged weights cross the link as this fraction of their bytes, decoded on the GPU after "
                   "(runtime.compress_streamed; 0: plain)")
      ->check(CLI::Range(0.0, 1.0));
  replay->add_option("--decode-gb-per-s", rep.decode_gb_per_s,
                     "the GPU decoder's rate (bf16 GB/s out) for --coded-ratio, where the spec has none");
  replay
      ->add_option("--show-plan", rep.show_plan,
                   "paper, autouvm: also print each plan's partition and the N tensors it fetches most often")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  replay->add_option("--top-ops", rep.top_ops, "also list the N slowest ops of each steady iteration")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  absl::Status status = record->parsed() ? Record(rec) : Replay(rep);
  if (!status.ok()) {
    std::cerr << "autouvm-sim: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
