// End-to-end: the daemon's metrics endpoint scraped by a real Prometheus (Debian's `prometheus`) — the
// scrape passes `promtool check metrics`, /healthz and /readyz answer, every metric of docs/metrics.md is
// a series Prometheus' HTTP API returns, the values move as requests complete, and every expression of
// the Grafana dashboard (deploy/grafana/autouvmd.json) parses and returns series.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/prometheus_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

constexpr char kModel[] = "tiny-llama";

grpc::Status Generate(DaemonProcess& d, const std::string& model, uint32_t max_tokens) {
  // Over 64 tokens: a prefill that streams weights under the budget (executor_e2e_test.cc's kPrompt).
  return CallGenerate(d, GreedyRequest(model,
                                       "hello metrics, a prompt long enough that its prefill cannot read the "
                                       "weights in place and streams what the budget does not pin",
                                       max_tokens));
}

TEST(MetricsE2E, PrometheusScrapesEveryMetricAndSeesThemMoveAsRequestsComplete) {
  // A budget below the model's bytes, so that the executor streams on the mirror and its counters move.
  // Profiled on demand, so that the counters move with the requests alone.
  DaemonProcess d(
      {.config_yaml = "model_defaults: {plan_at_load: false}\nmodels: {tiny-llama: {device_budget: 8388608}}\n"});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  autouvm::v1::ServerStatus status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.admin()->GetServerStatus(&ctx, {}, &status).ok());
  }
  const std::string address = status.metrics_address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  ASSERT_GT(port, 0);

  httplib::Client http("127.0.0.1", port);
  auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  auto readyz = http.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(http.Get("/nothing-here")->status, 404);

  // Traffic: served requests, then refused ones (an unknown model, a bad field).
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Generate(d, kModel, 6).ok());
  EXPECT_EQ(Generate(d, "no-such-model", 4).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Generate(d, kModel, 1u << 30).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The scrape is valid Prometheus text.
  auto scrape = http.Get("/metrics");
  ASSERT_TRUE(scrape);
  ASSERT_EQ(scrape->status, 200);
  EXPECT_NE(scrape->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  TempDir tmp;
  std::ofstream(tmp.Sub("scrape.txt")) << scrape->body;
  std::string out, err;
  EXPECT_EQ(RunCommand({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + tmp.Sub("scrape.txt")}, &out, &err), 0)
      << out << err;

  PrometheusProcess prom(address);
  ASSERT_TRUE(Eventually([&] { return prom.Ready(); })) << prom.Log();
  const std::string m = "{model=\"tiny-llama\"}";
  ASSERT_TRUE(Eventually([&] { return prom.Sum("autouvm_requests_total{model=\"tiny-llama\",code=\"OK\"}") >= 3; }))
      << prom.Log();
  EXPECT_EQ(prom.Sum("autouvm_requests_total{model=\"\",code=\"NOT_FOUND\"}"), 1);
  EXPECT_EQ(prom.Sum("autouvm_requests_total{model=\"tiny-llama\",code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(prom.Sum("autouvm_generation_tokens_total" + m), 18);
  EXPECT_EQ(prom.Sum("autouvm_time_to_first_token_seconds_count" + m), 3);
  EXPECT_EQ(prom.Sum("autouvm_inter_token_latency_seconds_count" + m), 15);  // 5 gaps per 6-token request
  // One after another: a prefill pass each (its prompt, unpadded) and a decode pass per later token.
  const std::string passes = "autouvm_forward_passes_total{model=\"tiny-llama\",kind=";
  const std::string pass_tokens = "autouvm_forward_pass_tokens_total{model=\"tiny-llama\",kind=";
  EXPECT_EQ(prom.Sum(passes + "\"prefill\"}"), 3);
  EXPECT_EQ(prom.Sum(passes + "\"decode\"}"), 15);
  EXPECT_EQ(prom.Sum(passes + "\"idle\"}"), 0);
  EXPECT_EQ(prom.Sum(pass_tokens + "\"prefill\"}"), prom.Sum("autouvm_prompt_tokens_total" + m));
  EXPECT_EQ(prom.Sum(pass_tokens + "\"decode\"}"), 15);
  const std::string pass_seconds = "autouvm_forward_pass_seconds_total{model=\"tiny-llama\",kind=";
  EXPECT_GT(prom.Sum(pass_seconds + "\"prefill\"}"), 0);
  EXPECT_GT(prom.Sum(pass_seconds + "\"decode\"}"), 0);
  EXPECT_EQ(prom.Sum(pass_seconds + "\"mixed\"}"), 0) << "no pass of both ran";
  EXPECT_EQ(prom.Sum("autouvm_prefill_tokens_waiting" + m), 0);
  // Note [Steps sized by their cost]: the decode passes set the pass floor.
  EXPECT_GT(prom.Sum("autouvm_pass_floor_seconds" + m), 0);
  EXPECT_GE(prom.Sum("autouvm_pass_token_seconds" + m), 0);
  // Note [Reserving KV blocks]: the ended requests hold no block; the pool is max_batch 8 x max_seq 512
  // positions, in blocks of 16.
  EXPECT_EQ(prom.Sum("autouvm_kv_cache_blocks{model=\"tiny-llama\",state=\"reserved\"}"), 0);
  EXPECT_EQ(prom.Sum("autouvm_kv_cache_blocks{model=\"tiny-llama\",state=\"total\"}"), 8 * 512 / 16);

  // Every metric of docs/metrics.md is a series, labelled by model where it belongs to one.
  for (const std::string name : {"autouvm_prompt_tokens_total",
                                 "autouvm_request_duration_seconds_bucket",
                                 "autouvm_queue_time_seconds_bucket",
                                 "autouvm_requests_running",
                                 "autouvm_requests_waiting",
                                 "autouvm_device_budget_bytes",
                                 "autouvm_plan_iterations_total",
                                 "autouvm_plan_switches_total",
                                 "autouvm_plan_switch_seconds_total",
                                 "autouvm_iterations_by_plan_total",
                                 "autouvm_prefetch_bytes_total",
                                 "autouvm_evicted_bytes_total",
                                 "autouvm_resident_bytes",
                                 "autouvm_staged_bytes",
                                 "autouvm_host_copy_bytes",
                                 "autouvm_in_place_bytes",
                                 "autouvm_displaced_bytes",
                                 "autouvm_in_place_read_bytes_total",
                                 "autouvm_peak_resident_bytes",
                                 "autouvm_gpu_page_fault_groups_total",
                                 "autouvm_migrated_bytes_total",
                                 "autouvm_dropped_bytes_total",
                                 "autouvm_driver_evictions_total",
                                 "autouvm_thrashing_events_total",
                                 "autouvm_throttling_events_total",
                                 "autouvm_remote_bytes_total",
                                 "autouvm_monitor_samples_total",
                                 "autouvm_monitor_reclassified_ops_total",
                                 "autouvm_monitor_repinned_bytes_total",
                                 "autouvm_model_sleeps_total",
                                 "autouvm_model_wakes_total",
                                 "autouvm_model_asleep",
                                 "autouvm_model_last_wake_seconds",
                                 "autouvm_profiles",
                                 "autouvm_profiles_unstable",
                                 "autouvm_profiling_seconds_total"}) {
    EXPECT_GE(prom.Sum(name + m), 0) << name << " has no series for the model";
  }
  for (const std::string name :
       {"autouvm_profile_mismatches_total", "autouvm_plans_made_again_total", "autouvm_profile_store_errors_total",
        "autouvm_profile_store_memory_bytes", "autouvm_process_resident_memory_bytes", "autouvm_uptime_seconds"}) {
    EXPECT_GE(prom.Sum(name), 0) << name << " has no series";
  }
  EXPECT_EQ(prom.Sum("autouvm_build_info{backend=\"cpu\",gpu=\"h200-pcie5\"}"), 1);
  EXPECT_GT(prom.Sum("autouvm_process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(prom.Sum("autouvm_profiles{model=\"tiny-llama\",state=\"ready\"}"), 1);
  EXPECT_GT(prom.Sum("autouvm_profiling_seconds_total" + m), 0);

  // Values move: more requests, and the executor's figures on the mirror grow with them (the shapes are
  // profiled by now, so these iterations follow their plans).
  const double followed = prom.Sum("autouvm_plan_iterations_total{model=\"tiny-llama\",outcome=\"followed\"}");
  const std::string by_plan = "autouvm_iterations_by_plan_total{model=\"tiny-llama\",plan=";
  const double own_before = prom.Sum(by_plan + "\"own\"}");
  const double none_before = prom.Sum(by_plan + "\"none\"}");
  const double h2d = prom.Sum("autouvm_migrated_bytes_total{model=\"tiny-llama\",direction=\"h2d\"}");
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Generate(d, kModel, 6).ok());
  EXPECT_TRUE(Eventually([&] { return prom.Sum("autouvm_requests_total{model=\"tiny-llama\",code=\"OK\"}") >= 5; }));
  EXPECT_TRUE(Eventually([&] { return prom.Sum("autouvm_generation_tokens_total" + m) >= 30; }));
  EXPECT_TRUE(Eventually([&] {
    return prom.Sum("autouvm_plan_iterations_total{model=\"tiny-llama\",outcome=\"followed\"}") >= followed + 12;
  })) << followed;
  EXPECT_TRUE(Eventually([&] {
    return prom.Sum("autouvm_migrated_bytes_total{model=\"tiny-llama\",direction=\"h2d\"}") > h2d;
  })) << h2d;
  EXPECT_EQ(prom.Sum("autouvm_plan_iterations_total{model=\"tiny-llama\",outcome=\"abandoned\"}"), 0);
  // Passes by plan: the model's first shape of each phase ran with none until its analysis ended (Note
  // [Planned from the nearest profile]); how many did depends on how fast this machine analyses, so only
  // the passes after it are counted exactly: the 12 passes of the last two requests followed their own
  // plans, and none ran without one.
  EXPECT_GE(none_before, 1);
  EXPECT_GE(prom.Sum(by_plan + "\"own\"}"), own_before + 12) << own_before;
  EXPECT_EQ(prom.Sum(by_plan + "\"none\"}"), none_before);

  // The Grafana dashboard, its variables as Grafana fills them for this model.
  std::ifstream file(AUTOUVM_DASHBOARD_PATH);
  const auto dashboard = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded()) << AUTOUVM_DASHBOARD_PATH << " is not JSON";
  auto fill = [](std::string e) {
    for (const auto& [var, value] :
         {std::pair<std::string, std::string>{"$__rate_interval", "1m"}, {"$model", kModel}}) {
      for (size_t at = e.find(var); at != std::string::npos; at = e.find(var, at + value.size())) {
        e.replace(at, var.size(), value);
      }
    }
    return e;
  };
  int expressions = 0;
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = fill(target["expr"].get<std::string>());
      ++expressions;
      const auto series = prom.Query(expr);
      ASSERT_TRUE(series.has_value()) << panel["title"] << ": does not parse: " << expr;
      EXPECT_FALSE(series->empty()) << panel["title"] << ": no series: " << expr;
    }
  }
  EXPECT_GE(expressions, 20);
  // The model variable's query: the models Grafana offers.
  EXPECT_EQ(prom.Sum("count(autouvm_requests_running)"), 1);
}

// Note [A deadline is not a cancellation] (engine/scheduler.cc): 20 calls whose deadline passes while
// they generate, streaming and unary, are 20 DEADLINE_EXCEEDED to the client and to the metric (it
// counted 16 of them as CANCELLED).
TEST(MetricsE2E, DeadlinesAreCountedAsDeadlinesNotCancellations) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  const autouvm::v1::GenerateRequest slow = GreedyRequest(kModel, "slow", 500);
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    grpc::Status s;
    if (i % 2 == 0) {
      auto reader = d.generation()->GenerateStream(&ctx, slow);
      autouvm::v1::GenerateStreamResponse msg;
      while (reader->Read(&msg)) {
      }
      s = reader->Finish();
    } else {
      autouvm::v1::GenerateResponse resp;
      s = d.generation()->Generate(&ctx, slow, &resp);
    }
    ASSERT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << i << ": " << s.error_message();
  }
  autouvm::v1::ServerStatus status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.admin()->GetServerStatus(&ctx, {}, &status).ok());
  }
  PrometheusProcess prom(status.metrics_address());
  ASSERT_TRUE(Eventually([&] { return prom.Ready(); })) << prom.Log();
  const std::string deadline = "autouvm_requests_total{model=\"tiny-llama\",code=\"DEADLINE_EXCEEDED\"}";
  ASSERT_TRUE(Eventually([&] { return prom.Sum(deadline) >= 20; })) << prom.Sum(deadline);
  EXPECT_EQ(prom.Sum(deadline), 20);
  EXPECT_LE(prom.Sum("autouvm_requests_total{model=\"tiny-llama\",code=\"CANCELLED\"}"), 0);  // -1: no series
}

}  // namespace
}  // namespace autouvm::testing
