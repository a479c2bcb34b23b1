#include "server/config.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "runtime/compute_device.h"
#include "runtime/gpu_spec.h"

namespace autouvm::server {

using base::ParseYamlDocument;
using base::ReadTextFile;
using base::YamlFields;

namespace {

constexpr int64_t kMaxInt = int64_t{1} << 31;

absl::Status CheckAddress(const std::string& key, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": '", address, "' is not host:port (port 0-65535)"));
  }
  return absl::OkStatus();
}

absl::Status ReadModelSettings(const YAML::Node& node, const std::string& path, ModelSettings* s) {
  YamlFields f(node, path);
  f.Int("max_batch", &s->max_batch, 1, 4096);
  f.Int("max_queue", &s->max_queue, 0, 1 << 20);
  f.Int("max_prefill_tokens", &s->max_prefill_tokens, 1, 1 << 24);
  f.Int("kv_cache_tokens", &s->kv_cache_tokens, 0, int64_t{1} << 40);
  f.Int("kv_block_tokens", &s->kv_block_tokens, 1, 1 << 16);
  f.DurationMs("max_queue_delay", &s->max_queue_delay_ms, 0, 60 * 1000);
  f.Bool("size_steps", &s->size_steps);
  f.Double("step_growth", &s->step_growth, 1, 1000);
  f.DurationMs("max_step", &s->max_step_ms, 0, 60 * 1000);
  f.Int("min_prefill_tokens", &s->min_prefill_tokens, 1, 1 << 24);
  f.Bool("plan_at_load", &s->plan_at_load);
  f.DurationMs("idle_sleep", &s->idle_sleep_ms, 0, int64_t{7} * 24 * 3600 * 1000);
  f.Double("sleep_floor", &s->sleep_floor, 0, 1e15);
  f.Double("share", &s->share, 1e-3, 1e6);
  f.Int("default_max_tokens", &s->default_max_tokens, 1, kMaxInt);
  f.Int("max_tokens_limit", &s->max_tokens_limit, 1, kMaxInt);
  f.String("policy", &s->policy);
  f.Double("device_budget", &s->device_budget, 0, 1e15);
  RETURN_IF_ERROR(f.Finish());
  if (s->policy != "stock" && s->policy != "paper" && s->policy != "autouvm") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".policy: '", s->policy, "' is not one of stock, paper, autouvm"));
  }
  if (s->device_budget < 0 || (s->device_budget > 1 && s->device_budget < 1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".device_budget: ", s->device_budget,
                     " is neither 0 (a share of what is left), a fraction of the GPU (0-1] nor bytes (>= 1 MiB)"));
  }
  if (s->sleep_floor > 1 && s->sleep_floor < 1 << 20) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".sleep_floor: ", s->sleep_floor,
                     " is neither a fraction of the device budget [0-1] nor bytes (>= 1 MiB)"));
  }
  if (s->idle_sleep_ms > 0 && s->policy != "autouvm") {
    return absl::InvalidArgumentError(absl::StrCat(path, ".idle_sleep: needs policy autouvm (the policy is ", s->policy,
                                                   "): only its executor gives device memory back"));
  }
  if (s->default_max_tokens > s->max_tokens_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".default_max_tokens: larger than max_tokens_limit (", s->max_tokens_limit, ")"));
  }
  return absl::OkStatus();
}

// server.tls: the files are read when the daemon starts (Daemon::Start); here, which go together.
absl::Status ReadTls(const YAML::Node& node, TlsSettings* t) {
  YamlFields f(node, "server.tls");
  f.String("cert_file", &t->cert_file);
  f.String("key_file", &t->key_file);
  f.String("client_ca_file", &t->client_ca_file);
  f.Bool("require_client_cert", &t->require_client_cert);
  f.DurationMs("reload_interval", &t->reload_interval_ms, 1000, 24 * 3600 * 1000);
  RETURN_IF_ERROR(f.Finish());
  if (t->cert_file.empty() != t->key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("server.tls.", t->cert_file.empty() ? "cert_file" : "key_file",
                                                   ": missing (TLS needs both cert_file and key_file)"));
  }
  if (!t->client_ca_file.empty() && !t->enabled()) {
    return absl::InvalidArgumentError(
        "server.tls.client_ca_file: needs cert_file and key_file (client certificates are asked for over TLS)");
  }
  if (t->require_client_cert && t->client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "server.tls.require_client_cert: needs client_ca_file (the CA client certificates are verified against)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml_text, const std::string& origin) {
  auto wrap = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  };
  ASSIGN_OR_RETURN(YAML::Node root, ParseYamlDocument(yaml_text, origin));
  ServerConfig c;
  YamlFields top(root, "");
  YAML::Node server = top.Map("server");
  YAML::Node repository = top.Map("repository");
  top.String("state_dir", &c.state_dir);
  YAML::Node runtime = top.Map("runtime");
  YAML::Node defaults = top.Map("model_defaults");
  YAML::Node models = top.Map("models");
  YAML::Node limits = top.Map("limits");
  YAML::Node profiler = top.Map("profiler");
  YAML::Node admin = top.Map("admin");
  if (auto s = top.Finish(); !s.ok()) return wrap(s);

  YamlFields fs(server, "server");
  fs.String("listen", &c.listen);
  fs.String("metrics_listen", &c.metrics_listen);
  fs.String("http_listen", &c.http_listen);
  fs.String("api_key_file", &c.api_key_file);
  fs.Int("http_threads", &c.http_threads, 1, 4096);
  fs.DurationMs("drain_timeout", &c.drain_timeout_ms, 0, 3600 * 1000);
  YAML::Node tls = fs.Map("tls");
  if (auto s = fs.Finish(); !s.ok()) return wrap(s);
  if (auto s = ReadTls(tls, &c.tls); !s.ok()) return wrap(s);
  if (auto s = CheckAddress("server.listen", c.listen); !s.ok()) return wrap(s);
  if (!c.metrics_listen.empty()) {
    if (auto s = CheckAddress("server.metrics_listen", c.metrics_listen); !s.ok()) return wrap(s);
  }
  if (!c.http_listen.empty()) {
    if (auto s = CheckAddress("server.http_listen", c.http_listen); !s.ok()) return wrap(s);
  }

  YamlFields fr(repository, "repository");
  fr.String("path", &c.model_repository);
  fr.String("generate_default_model", &c.generate_default_model);
  if (auto s = fr.Finish(); !s.ok()) return wrap(s);
  if (c.model_repository.empty()) return wrap(absl::InvalidArgumentError("repository.path: must not be empty"));
  if (c.state_dir.empty()) return wrap(absl::InvalidArgumentError("state_dir: must not be empty"));

  YamlFields ft(runtime, "runtime");
  ft.String("backend", &c.backend);
  ft.Int("intra_op_threads", &c.intra_op_threads, 0, 1024);
  ft.String("gpu", &c.gpu);
  ft.Bool("executor", &c.executor);
  ft.Int("monitor_every", &c.monitor_every, 0, 1000000);
  ft.Double("monitor_min_interval_s", &c.monitor_min_interval_s, 0, 86400);
  ft.Bool("compress_streamed", &c.compress_streamed);
  ft.Bool("cuda_graphs", &c.cuda_graphs);
  ft.Int("cuda_graph_max_batch", &c.cuda_graph_max_batch, 1, 4096);
  ft.Int("cuda_graph_max_tokens", &c.cuda_graph_max_tokens, 0, 65536);
  ft.Bool("cuda_graphs_streaming", &c.cuda_graphs_streaming);
  ft.Double("device_reserve", &c.device_reserve, 0, 1e15);
  if (auto s = ft.Finish(); !s.ok()) return wrap(s);
  if (c.device_reserve >= 1 && c.device_reserve < 1 << 20) {
    return wrap(absl::InvalidArgumentError(absl::StrCat(
        "runtime.device_reserve: ", c.device_reserve, " is neither a fraction of the GPU [0-1) nor bytes (>= 1 MiB)")));
  }
  if (auto spec = runtime::FindGpuSpec(c.gpu); !spec.ok()) {
    return wrap(absl::InvalidArgumentError(absl::StrCat("runtime.gpu: ", spec.status().message())));
  }
  YamlFields fp(profiler, "profiler");
  fp.Bool("enabled", &c.profiling);
  if (auto s = fp.Finish(); !s.ok()) return wrap(s);
  YamlFields fa(admin, "admin");
  fa.String("token_file", &c.admin_token_file);
  if (auto s = fa.Finish(); !s.ok()) return wrap(s);
  if (const auto backends = runtime::ComputeBackends();
      std::find(backends.begin(), backends.end(), c.backend) == backends.end()) {
    return wrap(absl::InvalidArgumentError(absl::StrCat(
        "runtime.backend: '", c.backend, "' is not available in this build (", absl::StrJoin(backends, ", "), ")")));
  }

  if (auto s = ReadModelSettings(defaults, "model_defaults", &c.model_defaults); !s.ok()) return wrap(s);
  if (models) {
    for (const auto& kv : models) {
      if (!kv.first.IsScalar()) return wrap(absl::InvalidArgumentError("models: a key that is not a model name"));
      const std::string name = kv.first.Scalar();
      ModelSettings settings = c.model_defaults;
      if (auto s = ReadModelSettings(kv.second, absl::StrCat("models.", name), &settings); !s.ok()) return wrap(s);
      c.models[name] = settings;
    }
  }

  YamlFields fl(limits, "limits");
  fl.Int("max_prompt_bytes", &c.limits.max_prompt_bytes, 1, kMaxInt);
  fl.Int("max_stop_strings", &c.limits.max_stop_strings, 0, 1024);
  fl.Int("max_stop_string_bytes", &c.limits.max_stop_string_bytes, 1, 1 << 16);
  fl.Int("max_stop_token_ids", &c.limits.max_stop_token_ids, 0, 1 << 16);
  fl.Int("max_receive_message_bytes", &c.limits.max_receive_message_bytes, 1024, kMaxInt);
  if (auto s = fl.Finish(); !s.ok()) return wrap(s);
  return c;
}

absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path) {
  if (path.empty()) return ParseServerConfig(EmbeddedDefaultConfig(), "embedded default config");
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the config file"));
  return ParseServerConfig(text, path);
}

}  // namespace autouvm::server
