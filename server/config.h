// The daemon's configuration: a YAML file (config/autouvmd.yaml is the embedded default, compiled in),
// then command-line flags on top. An invalid file is an error that names the key (`server.listen: ...`).
//
// Plain values and pure functions; safe from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace autouvm::server {

struct ModelSettings {
  int64_t max_batch = 8;              // requests decoded together (KV-cache slots)
  int64_t max_queue = 64;             // requests waiting for a slot; more get RESOURCE_EXHAUSTED
  int64_t max_prefill_tokens = 2048;  // most prompt tokens one pass computes; longer prompts are chunked
  // The KV cache's pool: positions of all running requests together (0: max_batch x the model's max_seq),
  // in blocks of kv_block_tokens (Note [Block KV cache], engine/kv_blocks.cc).
  int64_t kv_cache_tokens = 0;
  int64_t kv_block_tokens = 16;
  // How long an idle model's first request may wait for others to share its first pass, at most (the
  // wait is also at most 5% of the model's last pass: engine::SchedulerOptions::max_queue_delay).
  int64_t max_queue_delay_ms = 10;
  // Note [Steps sized by their cost] (engine/step_cost.cc): while requests decode, a pass takes the
  // prompt tokens predicted to keep it within max(step_growth x the pass floor, max_step), at least
  // min_prefill_tokens.
  bool size_steps = false;
  double step_growth = 2.0;
  int64_t max_step_ms = 0;
  int64_t min_prefill_tokens = 64;
  // Plan the model's first shapes of each phase before it is served (Note [Plans before the first
  // request], server/model_manager.cc); false: every shape is profiled at its first request.
  bool plan_at_load = true;
  // Note [A model asleep] (profiler/model_execution.cc): a model with no request for idle_sleep gives its
  // device memory back down to sleep_floor (a fraction of its device budget when <= 1, bytes when larger)
  // and wakes at its next request; 0: never sleeps. Needs policy autouvm (the executor keeps the budget).
  int64_t idle_sleep_ms = 0;
  double sleep_floor = 0;
  // Note [Passes by shares] (engine/step_turns.cc): the model's weight when the models of the device
  // take turns at forward passes; while several have work, each gets passes' time in proportion to it.
  double share = 1;
  int64_t default_max_tokens = 128;  // when a request leaves max_tokens unset
  int64_t max_tokens_limit = 4096;   // largest max_tokens a request may ask for
  std::string policy = "autouvm";    // stock, paper or autouvm (ARCHITECTURE.md "Memory model and policies")
  // The device memory the model's plan may keep resident: a fraction of the GPU's memory when <= 1,
  // bytes when larger; 0: a share of what runtime.device_reserve and the other models' budgets leave
  // (Note [Budgets that hold together], server/device_budgets.cc).
  double device_budget = 0;

  int64_t SleepFloorBytes(int64_t budget_bytes) const {
    return sleep_floor <= 1 ? static_cast<int64_t>(sleep_floor * static_cast<double>(budget_bytes))
                            : std::min(budget_bytes, static_cast<int64_t>(sleep_floor));
  }
  int64_t DeviceBudgetBytes(int64_t gpu_memory_bytes) const {
    return device_budget <= 1 ? static_cast<int64_t>(device_budget * static_cast<double>(gpu_memory_bytes))
                              : static_cast<int64_t>(device_budget);
  }
};

struct Limits {
  int64_t max_prompt_bytes = 1 << 20;
  int64_t max_stop_strings = 16;
  int64_t max_stop_string_bytes = 256;
  int64_t max_stop_token_ids = 64;
  int64_t max_receive_message_bytes = 4 << 20;
};

// TLS on the gRPC port (server.tls; docs/configuration.md). Off unless cert_file is set.
struct TlsSettings {
  std::string cert_file;               // PEM certificate chain the port presents
  std::string key_file;                // PEM private key of cert_file
  std::string client_ca_file;          // PEM CA bundle that client certificates are verified against ("": none asked)
  bool require_client_cert = false;    // refuse clients without a certificate from client_ca_file (mTLS)
  int64_t reload_interval_ms = 60000;  // how often the files are read again (rotated certificates)

  bool enabled() const { return !cert_file.empty(); }
};

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  TlsSettings tls;
  std::string metrics_listen = "127.0.0.1:9090";
  // The OpenAI-compatible HTTP API (docs/openai-api.md; "" disables), with TLS as `tls` sets it for gRPC.
  std::string http_listen = "127.0.0.1:8000";
  // Keys the HTTP API's /v1/ routes ask for, one per line ("": none asked; docs/openai-api.md).
  std::string api_key_file;
  int64_t http_threads = 256;  // HTTP connections served at once (each streamed response holds one)
  int64_t drain_timeout_ms = 30000;
  std::string model_repository = "models";
  // Written into the repository on start when missing ("" disables): the embedded tiny default model.
  std::string generate_default_model = "tiny-llama";
  std::string state_dir = "state";
  std::string backend = "cpu";
  int64_t intra_op_threads = 0;    // 0: libtorch's default
  std::string gpu = "h200-pcie5";  // the GpuSpec profiles are planned for and keyed by (runtime/gpu_spec.h)
  bool profiling = true;           // profile each (model, shape) on first use (profiler.enabled)
  bool executor = true;            // follow plans at op boundaries (runtime.executor)
  // Device memory no model's budget counts (the CUDA context, the libraries' workspaces, each pass's
  // activations): a fraction of the GPU's memory when <= 1, bytes when larger (runtime.device_reserve).
  double device_reserve = 0.05;
  // Stream weights over the link exponent-coded and decode them on the GPU (runtime.compress_streamed;
  // Note [Coded host copies], runtime/cuda/cuda_backend_coded.cc): lossless, fewer bytes per step. CUDA only.
  bool compress_streamed = false;
  // Decode and packed steps run as CUDA graphs of their bucket (runtime.cuda_graphs; Note [Captured steps],
  // engine/step_graphs.cc), up to cuda_graph_max_batch decode rows and cuda_graph_max_tokens prompt tokens
  // (Note [Packed steps by bucket], engine/step_graph_options.h). CUDA only.
  bool cuda_graphs = true;
  int64_t cuda_graph_max_batch = 32;
  int64_t cuda_graph_max_tokens = 512;
  // With cuda_graphs, decode steps that stream weights through their plan's device buffer are captured
  // too, with the plan's copies (runtime.cuda_graphs_streaming; Note [Staged passes captured],
  // runtime/executor_capture.cc), coded copies included (Note [Coded copies captured],
  // runtime/cuda/cuda_backend_capture.cc). On: 0.85-0.96 of the eager step at factor 1.1 on the H100, within
  // 3% of it at 1.25-2.0 (bench/results/2026-12-07-staged-graphs-whole-pools-h100.md, docs/profiling.md).
  bool cuda_graphs_streaming = true;
  int64_t monitor_every = 64;         // time one followed iteration in this many (runtime.monitor_every; 0: never)
  double monitor_min_interval_s = 5;  // and none sooner than this after the last (runtime.monitor_min_interval_s)
  // A file holding the bearer token Admin calls must carry ("" with AUTOUVM_ADMIN_TOKEN unset: no token).
  std::string admin_token_file;
  ModelSettings model_defaults;
  std::map<std::string, ModelSettings> models;  // per-model settings, on top of model_defaults
  Limits limits;

  int64_t DeviceReserveBytes(int64_t gpu_memory_bytes) const {
    return device_reserve <= 1 ? static_cast<int64_t>(device_reserve * static_cast<double>(gpu_memory_bytes))
                               : static_cast<int64_t>(device_reserve);
  }
  const ModelSettings& SettingsFor(const std::string& model) const {
    auto it = models.find(model);
    return it == models.end() ? model_defaults : it->second;
  }
};

// The text of config/autouvmd.yaml, compiled in.
const char* EmbeddedDefaultConfig();

// Parses a config file's text over the built-in defaults; `origin` names the file in messages.
absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml_text, const std::string& origin);
absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path);  // "" → the embedded default

}  // namespace autouvm::server
