#include "server/metrics.h"

#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "profiler/profile_jobs.h"
#include "profiler/profile_repository.h"
#include "server/tls.h"

namespace autouvm::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<std::pair<std::string, std::string>>;

// Exponential bucket bounds from `start`, each `factor` times the last, `count` of them.
prometheus::Histogram::BucketBoundaries Buckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = start; count-- > 0; v *= factor) b.push_back(v);
  return b;
}

// Families read at scrape time from their owners.
class Snapshot {
 public:
  MetricFamily* Family(const std::string& name, const std::string& help, MetricType type) {
    out_.push_back({name, help, type, {}});
    return &out_.back();
  }
  static void Add(MetricFamily* f, const Labels& labels, double value) {
    ClientMetric m;
    for (const auto& [k, v] : labels) m.label.push_back({k, v});
    if (f->type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    f->metric.push_back(std::move(m));
  }
  std::deque<MetricFamily> Take() { return std::move(out_); }

 private:
  std::deque<MetricFamily> out_;  // a deque: Family's pointers stay valid as families are added
};

int64_t ResidentMemoryBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::string StateLabel(profiler::ProfileState s) { return std::string(profiler::ProfileStateName(s)); }

}  // namespace

Metrics::Metrics(MetricsSources sources)
    : sources_(std::move(sources)),
      started_(std::chrono::steady_clock::now()),
      registry_(std::make_unique<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("autouvm_requests_total")
                   .Help("Generation requests finished, by model and gRPC status code")
                   .Register(*registry_);
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("autouvm_prompt_tokens_total")
                        .Help("Prompt tokens of the requests run")
                        .Register(*registry_);
  generation_tokens_ =
      &prometheus::BuildCounter().Name("autouvm_generation_tokens_total").Help("Tokens generated").Register(*registry_);
  ttft_ = &prometheus::BuildHistogram()
               .Name("autouvm_time_to_first_token_seconds")
               .Help("From a request's arrival to its first generated token")
               .Register(*registry_);
  inter_token_ = &prometheus::BuildHistogram()
                      .Name("autouvm_inter_token_latency_seconds")
                      .Help("Between two consecutive generated tokens of a request")
                      .Register(*registry_);
  duration_ = &prometheus::BuildHistogram()
                   .Name("autouvm_request_duration_seconds")
                   .Help("From a request's arrival to its end (end-to-end latency)")
                   .Register(*registry_);
  queue_ = &prometheus::BuildHistogram()
                .Name("autouvm_queue_time_seconds")
                .Help("Time a request waited for a slot in its model's batch")
                .Register(*registry_);
}

Metrics::~Metrics() = default;

void Metrics::RecordRequest(const std::string& model, absl::StatusCode code, const engine::GenerationResult* result) {
  requests_->Add({{"model", model}, {"code", absl::StatusCodeToString(code)}}).Increment();
  if (result == nullptr) return;
  prompt_tokens_->Add({{"model", model}}).Increment(result->prompt_tokens);
  generation_tokens_->Add({{"model", model}}).Increment(result->completion_tokens);
  duration_->Add({{"model", model}}, Buckets(0.01, 2, 16)).Observe(result->total_ms / 1e3);
  queue_->Add({{"model", model}}, Buckets(0.001, 2, 16)).Observe(result->queue_ms / 1e3);
  if (result->completion_tokens > 0) {
    ttft_->Add({{"model", model}}, Buckets(0.005, 2, 15)).Observe(result->time_to_first_token_ms / 1e3);
  }
}

void Metrics::RecordTokenGap(const std::string& model, double seconds) {
  inter_token_->Add({{"model", model}}, Buckets(0.001, 2, 14)).Observe(seconds);
}

std::string Metrics::Scrape() const {
  std::vector<MetricFamily> families = registry_->Collect();
  Snapshot s;
  using T = MetricType;
  auto* running = s.Family("autouvm_requests_running", "Requests generating now (in the model's batch)", T::Gauge);
  auto* waiting = s.Family("autouvm_requests_waiting", "Requests queued for a slot", T::Gauge);
  auto* passes =
      s.Family("autouvm_forward_passes_total", "Forward passes run, by kind (prefill, decode, idle)", T::Counter);
  auto* pass_tokens = s.Family(
      "autouvm_forward_pass_tokens_total",
      "Tokens the forward passes computed, by kind (a prefill's padding included; a decode's rows)", T::Counter);
  auto* pass_seconds = s.Family("autouvm_forward_pass_seconds_total",
                                "Time of the forward passes, by kind: each pass and its plan's hooks (a switch "
                                "included), not its wait for a turn beside other models",
                                T::Counter);
  auto* prompts_waiting = s.Family("autouvm_prefill_tokens_waiting",
                                   "Prompt tokens of the requests queued or admitted, not prefilled yet", T::Gauge);
  auto* pass_floor = s.Family("autouvm_pass_floor_seconds",
                              "A forward pass of decode rows only, as learned from the passes run", T::Gauge);
  auto* pass_token = s.Family("autouvm_pass_token_seconds",
                              "What a token adds to a pass that outgrows the floor (0: none has yet)", T::Gauge);
  auto* kv_blocks =
      s.Family("autouvm_kv_cache_blocks",
               "KV-cache blocks: in the pool (total) and held by the running requests (reserved)", T::Gauge);
  auto* share =
      s.Family("autouvm_model_share",
               "The model's weight when the device's models take turns at passes (models.<name>.share)", T::Gauge);
  auto* turn_wait =
      s.Family("autouvm_model_turn_wait_seconds_total",
               "Time the model's passes waited for their turn while other models' passes ran", T::Counter);
  auto* budget = s.Family("autouvm_device_budget_bytes",
                          "The model's device budget (model_defaults / models.<name>.device_budget)", T::Gauge);
  auto* followed = s.Family("autouvm_plan_iterations_total",
                            "Iterations that followed a plan, by outcome (followed, abandoned)", T::Counter);
  auto* switches = s.Family("autouvm_plan_switches_total", "Plans prepared to hold the model's placement", T::Counter);
  auto* switch_seconds =
      s.Family("autouvm_plan_switch_seconds_total",
               "Host time of the plan switches: the plan before released, the new one prepared", T::Counter);
  auto* by_plan =
      s.Family("autouvm_iterations_by_plan_total",
               "Forward passes by the plan they followed: their shape's own, the nearest shape's, none", T::Counter);
  auto* prefetch =
      s.Family("autouvm_prefetch_bytes_total", "Bytes the executor asked to fetch ahead of need", T::Counter);
  auto* evicted = s.Family("autouvm_evicted_bytes_total", "Bytes the executor evicted", T::Counter);
  auto* resident = s.Family("autouvm_resident_bytes", "Named bytes the executor holds on the device", T::Gauge);
  auto* staged = s.Family("autouvm_staged_bytes", "Weights kept as host copies outside managed memory", T::Gauge);
  auto* host_copies = s.Family("autouvm_host_copy_bytes",
                               "Pinned host memory held for weights' host copies (staged or kept for reuse)", T::Gauge);
  auto* in_place =
      s.Family("autouvm_in_place_bytes", "Streamed weights the executor could not stage and reads in place", T::Gauge);
  auto* displaced =
      s.Family("autouvm_displaced_bytes", "Pinned weights read in place to make room for the KV rows in use", T::Gauge);
  auto* in_place_read =
      s.Family("autouvm_in_place_read_bytes_total",
               "Weights read in place over the link, summed over the passes that followed a plan", T::Counter);
  auto* peak =
      s.Family("autouvm_peak_resident_bytes", "The most named bytes the executor has held on the device", T::Gauge);
  auto* faults = s.Family("autouvm_gpu_page_fault_groups_total", "Batches of GPU page faults serviced", T::Counter);
  auto* migrated = s.Family("autouvm_migrated_bytes_total",
                            "Bytes moved over the link, by direction (h2d, d2h) and cause", T::Counter);
  auto* dropped = s.Family("autouvm_dropped_bytes_total", "Device copies dropped without a copy back", T::Counter);
  auto* evictions = s.Family("autouvm_driver_evictions_total", "Evictions by the UVM driver", T::Counter);
  auto* thrashing = s.Family("autouvm_thrashing_events_total", "Thrashing events", T::Counter);
  auto* throttling = s.Family("autouvm_throttling_events_total", "Throttling events (CUDA)", T::Counter);
  auto* remote = s.Family("autouvm_remote_bytes_total", "Bytes the device reached in place over the link", T::Counter);
  auto* coded =
      s.Family("autouvm_coded_bytes_total",
               "Staged weights' bytes that crossed the link exponent-coded (runtime.compress_streamed)", T::Counter);
  auto* decoded =
      s.Family("autouvm_decoded_bytes_total", "The bf16 bytes the coded staged weights decoded into", T::Counter);
  auto* decode_seconds =
      s.Family("autouvm_decode_seconds_total", "GPU time decoding coded weights (eagerly run steps)", T::Counter);
  auto* sampled =
      s.Family("autouvm_monitor_samples_total", "Iterations the runtime monitor timed op by op", T::Counter);
  auto* reclassified =
      s.Family("autouvm_monitor_reclassified_ops_total", "Ops whose measured class differed from the plan", T::Counter);
  auto* repinned =
      s.Family("autouvm_monitor_repinned_bytes_total", "Pinned bytes brought back by the monitor", T::Counter);
  auto* sleeps = s.Family("autouvm_model_sleeps_total",
                          "Times the idle model gave its device memory back (models.<name>.idle_sleep)", T::Counter);
  auto* wakes = s.Family("autouvm_model_wakes_total", "Times a request woke the sleeping model", T::Counter);
  auto* asleep = s.Family("autouvm_model_asleep", "1 while the model sleeps", T::Gauge);
  auto* wake_seconds =
      s.Family("autouvm_model_last_wake_seconds", "How long the pass that last woke the model took", T::Gauge);
  auto* graphs =
      s.Family("autouvm_step_graphs", "Steps' CUDA graphs held, decode and packed (runtime.cuda_graphs)", T::Gauge);
  auto* graph_replays =
      s.Family("autouvm_step_graph_replays_total", "Steps (decode and packed) a CUDA graph ran", T::Counter);
  auto* graph_captures =
      s.Family("autouvm_step_graph_captures_total", "Captures of steps, by outcome (captured, failed)", T::Counter);
  auto* graph_seconds = s.Family("autouvm_step_graph_capture_seconds_total", "Time spent capturing steps", T::Counter);
  auto* graph_bytes =
      s.Family("autouvm_step_graph_bytes", "Device memory the steps' graphs hold (their activations)", T::Gauge);
  auto* profiles = s.Family("autouvm_profiles", "Profile keys this process knows, by state", T::Gauge);
  auto* profiling =
      s.Family("autouvm_profiling_seconds_total", "Seconds spent recording and analysing profiles", T::Counter);
  std::map<std::string, std::string> by_digest;
  for (const ModelView& v : sources_.models->List()) {
    if (v.state != ModelState::kReady) continue;
    const ServedModel& m = *v.model;
    by_digest[m.digest] = m.name;
    const Labels model{{"model", m.name}};
    const engine::SchedulerStats st = m.scheduler->Stats();
    Snapshot::Add(running, model, st.active);
    Snapshot::Add(waiting, model, st.queued);
    Snapshot::Add(passes, {{"model", m.name}, {"kind", "prefill"}}, st.prefill_passes_total);
    Snapshot::Add(passes, {{"model", m.name}, {"kind", "decode"}}, st.decode_steps_total);
    Snapshot::Add(passes, {{"model", m.name}, {"kind", "mixed"}}, st.mixed_passes_total);
    Snapshot::Add(passes, {{"model", m.name}, {"kind", "idle"}}, st.idle_passes_total);
    Snapshot::Add(pass_tokens, {{"model", m.name}, {"kind", "prefill"}}, st.prefill_pass_tokens_total);
    Snapshot::Add(pass_tokens, {{"model", m.name}, {"kind", "decode"}}, st.decode_pass_tokens_total);
    Snapshot::Add(pass_tokens, {{"model", m.name}, {"kind", "mixed"}}, st.mixed_pass_tokens_total);
    Snapshot::Add(pass_seconds, {{"model", m.name}, {"kind", "prefill"}}, st.prefill_pass_seconds_total);
    Snapshot::Add(pass_seconds, {{"model", m.name}, {"kind", "decode"}}, st.decode_pass_seconds_total);
    Snapshot::Add(pass_seconds, {{"model", m.name}, {"kind", "mixed"}}, st.mixed_pass_seconds_total);
    Snapshot::Add(prompts_waiting, model, st.prompt_tokens_waiting);
    Snapshot::Add(pass_floor, model, st.pass_floor_seconds);
    Snapshot::Add(pass_token, model, st.pass_token_seconds);
    Snapshot::Add(kv_blocks, {{"model", m.name}, {"state", "total"}}, st.kv_blocks_total);
    Snapshot::Add(share, model, m.settings.share);
    Snapshot::Add(turn_wait, model, st.turn_wait_seconds_total);
    Snapshot::Add(kv_blocks, {{"model", m.name}, {"state", "reserved"}}, st.kv_blocks_reserved);
    if (m.graphs_on) {
      const engine::StepGraphStats g = m.runner->step_graph_stats();
      Snapshot::Add(graphs, model, g.graphs);
      Snapshot::Add(graph_replays, model, g.replays);
      Snapshot::Add(graph_captures, {{"model", m.name}, {"outcome", "captured"}}, g.captures);
      Snapshot::Add(graph_captures, {{"model", m.name}, {"outcome", "failed"}}, g.capture_failures);
      Snapshot::Add(graph_seconds, model, g.capture_seconds);
      Snapshot::Add(graph_bytes, model, g.bytes);
    }
    if (m.session != nullptr) {
      Snapshot::Add(budget, model, m.session->identity().device_budget_bytes);
      const profiler::SessionStats ss = m.session->stats();
      Snapshot::Add(by_plan, {{"model", m.name}, {"plan", "own"}}, ss.own);
      Snapshot::Add(by_plan, {{"model", m.name}, {"plan", "nearest"}}, ss.nearest);
      Snapshot::Add(by_plan, {{"model", m.name}, {"plan", "none"}}, ss.none);
    }
    if (m.execution == nullptr) continue;
    const profiler::ExecutionStats e = m.execution->stats();
    const Labels uvm{{"model", m.name}, {"backend", e.backend}};
    Snapshot::Add(followed, {{"model", m.name}, {"backend", e.backend}, {"outcome", "followed"}},
                  e.followed_iterations);
    Snapshot::Add(followed, {{"model", m.name}, {"backend", e.backend}, {"outcome", "abandoned"}},
                  e.abandoned_iterations);
    Snapshot::Add(switches, uvm, e.plan_switches);
    Snapshot::Add(switch_seconds, uvm, e.plan_switch_seconds);
    Snapshot::Add(prefetch, uvm, e.prefetched_bytes);
    Snapshot::Add(evicted, uvm, e.evicted_bytes);
    Snapshot::Add(resident, uvm, e.resident_bytes);
    Snapshot::Add(staged, uvm, e.staged_bytes);
    Snapshot::Add(host_copies, uvm, e.host_copy_bytes);
    Snapshot::Add(in_place, uvm, e.in_place_bytes);
    Snapshot::Add(displaced, uvm, e.displaced_bytes);
    Snapshot::Add(in_place_read, uvm, e.in_place_read_bytes);
    Snapshot::Add(peak, uvm, e.peak_resident_bytes);
    Snapshot::Add(faults, uvm, e.counters.gpu_fault_groups);
    for (int c = 0; c < runtime::kMigrationCauses; ++c) {
      const std::string cause(runtime::MigrationCauseName(static_cast<runtime::MigrationCause>(c)));
      Snapshot::Add(migrated, {{"model", m.name}, {"backend", e.backend}, {"direction", "h2d"}, {"cause", cause}},
                    e.counters.h2d_bytes[c]);
      Snapshot::Add(migrated, {{"model", m.name}, {"backend", e.backend}, {"direction", "d2h"}, {"cause", cause}},
                    e.counters.d2h_bytes[c]);
    }
    Snapshot::Add(dropped, uvm, e.counters.dropped_bytes);
    Snapshot::Add(evictions, uvm, e.counters.evictions);
    Snapshot::Add(thrashing, uvm, e.counters.thrashing);
    Snapshot::Add(throttling, uvm, e.counters.throttling);
    Snapshot::Add(remote, uvm, e.counters.remote_bytes);
    Snapshot::Add(coded, uvm, e.counters.coded_bytes);
    Snapshot::Add(decoded, uvm, e.counters.decoded_bytes);
    Snapshot::Add(decode_seconds, uvm, static_cast<double>(e.counters.decode_ns) / 1e9);
    Snapshot::Add(sampled, uvm, e.sampled_iterations);
    Snapshot::Add(reclassified, uvm, e.reclassified_ops);
    Snapshot::Add(repinned, uvm, e.repinned_bytes);
    Snapshot::Add(sleeps, model, e.sleeps);
    Snapshot::Add(wakes, model, e.wakes);
    Snapshot::Add(asleep, model, e.asleep ? 1 : 0);
    Snapshot::Add(wake_seconds, model, e.last_wake_seconds);
  }
  if (sources_.jobs != nullptr) {
    // Every state of every model, zeros included, so that a state's series exists before it is reached.
    std::map<std::pair<std::string, std::string>, int64_t> counts;
    for (const auto& [digest, name] : by_digest) {
      for (auto st :
           {profiler::ProfileState::kUnprofiled, profiler::ProfileState::kRecording, profiler::ProfileState::kAnalyzing,
            profiler::ProfileState::kReady, profiler::ProfileState::kStale, profiler::ProfileState::kFailed}) {
        counts[{name, StateLabel(st)}] = 0;
      }
    }
    std::map<std::string, int64_t> unstable;
    for (const auto& [digest, name] : by_digest) unstable[name] = 0;
    for (const profiler::ProfileStatus& p : sources_.jobs->All()) {
      auto it = by_digest.find(p.key.model_digest());
      if (it == by_digest.end()) continue;
      ++counts[{it->second, StateLabel(p.state)}];
      if (p.unstable) ++unstable[it->second];
    }
    for (const auto& [k, n] : counts) Snapshot::Add(profiles, {{"model", k.first}, {"state", k.second}}, n);
    auto* unstable_family = s.Family("autouvm_profiles_unstable",
                                     "Profile keys whose ops differed from their profile twice: served by their "
                                     "last plan and not profiled again (Note [A shape whose ops move])",
                                     T::Gauge);
    for (const auto& [model, n] : unstable) Snapshot::Add(unstable_family, {{"model", model}}, n);
    const auto seconds = sources_.jobs->ProfilingSeconds();
    for (const auto& [digest, name] : by_digest) {
      auto it = seconds.find(digest);
      Snapshot::Add(profiling, {{"model", name}}, it == seconds.end() ? 0 : it->second);
    }
    Snapshot::Add(
        s.Family("autouvm_profile_mismatches_total",
                 "Iterations whose ops differed from their profile (the key is profiled again once)", T::Counter),
        {}, sources_.jobs->identity_mismatches());
    Snapshot::Add(s.Family("autouvm_plans_made_again_total",
                           "Plans made again with their weights' measured coded sizes that differ from the plans "
                           "they replaced (Note [Plans made again with the coded sizes])",
                           T::Counter),
                  {}, sources_.jobs->plans_made_again());
  }
  if (sources_.repository != nullptr) {
    Snapshot::Add(s.Family("autouvm_profile_store_errors_total",
                           "Stored profiles or plans that failed their checksum or did not parse", T::Counter),
                  {}, sources_.repository->corrupt_reads());
    Snapshot::Add(s.Family("autouvm_profile_store_memory_bytes",
                           "Memory the profile store holds for what was written (RocksDB's memtables and table "
                           "readers)",
                           T::Gauge),
                  {}, static_cast<double>(sources_.repository->memory_bytes()));
  }
  if (sources_.tls != nullptr) {
    const TlsFiles::State tls = sources_.tls->state();
    Snapshot::Add(s.Family("autouvm_tls_certificate_expiry_timestamp_seconds",
                           "When the gRPC port's certificate in use expires (seconds since the epoch)", T::Gauge),
                  {}, static_cast<double>(tls.not_after_unix));
    auto* reloads =
        s.Family("autouvm_tls_certificate_reloads_total",
                 "Changed certificate files taken (applied) or refused, the last good set kept", T::Counter);
    Snapshot::Add(reloads, {{"result", "applied"}}, static_cast<double>(tls.applied));
    Snapshot::Add(reloads, {{"result", "refused"}}, static_cast<double>(tls.refused));
  }
  Snapshot::Add(s.Family("autouvm_process_resident_memory_bytes", "Resident memory of the daemon", T::Gauge), {},
                ResidentMemoryBytes());
  Snapshot::Add(s.Family("autouvm_uptime_seconds", "Seconds since the daemon started", T::Gauge), {},
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  Snapshot::Add(s.Family("autouvm_build_info", "The daemon's version, compute backend and GPU spec", T::Gauge),
                {{"version", sources_.version}, {"backend", sources_.backend}, {"gpu", sources_.gpu}}, 1);
  for (MetricFamily& f : s.Take()) {
    if (!f.metric.empty()) families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen, const Metrics* metrics,
                                                                    std::function<bool()> ready) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("server.metrics_listen: '", listen, "' is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::unique_ptr<MetricsServer> self(new MetricsServer());
  self->http_ = std::make_unique<httplib::Server>();
  self->http_->Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  self->http_->Get("/healthz",
                   [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  self->http_->Get("/readyz", [ready = std::move(ready)](const httplib::Request&, httplib::Response& res) {
    const bool ok = ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ready\n" : "not ready\n", "text/plain");
  });
  const int bound =
      port == 0 ? self->http_->bind_to_any_port(host) : (self->http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("server.metrics_listen: cannot listen on ", listen));
  }
  self->address_ = absl::StrCat(listen.substr(0, colon), ":", bound);
  httplib::Server* http = self->http_.get();
  self->thread_ = std::thread([http] { http->listen_after_bind(); });
  return self;
}

MetricsServer::~MetricsServer() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace autouvm::server
