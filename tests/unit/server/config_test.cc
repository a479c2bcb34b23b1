// ParseServerConfig / LoadServerConfig: the embedded default, strict keys and types, per-model settings.
#include "server/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace autouvm::server {
namespace {

using ::testing::HasSubstr;

constexpr char kOrigin[] = "test.yaml";

// Parses `yaml` and expects INVALID_ARGUMENT whose message names `key` (a dotted path) as the culprit.
void ExpectInvalid(const std::string& yaml, const std::string& key) {
  SCOPED_TRACE(yaml);
  auto c = ParseServerConfig(yaml, kOrigin);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr(key + ":"));
  EXPECT_THAT(message, HasSubstr(kOrigin));
}

TEST(ServerConfigTest, EmbeddedDefaultParses) {
  auto c = ParseServerConfig(EmbeddedDefaultConfig(), "embedded");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50051");
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:9090");
  EXPECT_EQ(c->drain_timeout_ms, 30000);
  EXPECT_EQ(c->backend, "cpu");
  EXPECT_EQ(c->model_defaults.max_batch, 8);
  EXPECT_EQ(c->model_defaults.max_tokens_limit, 4096);
  EXPECT_TRUE(c->models.empty());
  EXPECT_EQ(c->limits.max_stop_strings, 16);
}

TEST(ServerConfigTest, LoadWithEmptyPathIsTheEmbeddedDefault) {
  auto c = LoadServerConfig("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50051");
}

TEST(ServerConfigTest, EmptyDocumentGivesBuiltInDefaults) {
  auto c = ParseServerConfig("", kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:50051");
  EXPECT_EQ(c->model_defaults.default_max_tokens, 128);
}

TEST(ServerConfigTest, FileValuesReplaceDefaultsKeyByKey) {
  auto c = ParseServerConfig("server:\n  listen: 0.0.0.0:0\nlimits:\n  max_stop_strings: 3\n", kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "0.0.0.0:0");
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:9090");  // untouched
  EXPECT_EQ(c->limits.max_stop_strings, 3);
  EXPECT_EQ(c->limits.max_stop_string_bytes, 256);
}

TEST(ServerConfigTest, UnknownTopLevelKeyIsNamed) { ExpectInvalid("serverr:\n  listen: 127.0.0.1:1\n", "serverr"); }

TEST(ServerConfigTest, UnknownNestedKeyIsNamedByDottedPath) {
  ExpectInvalid("server:\n  lisen: 127.0.0.1:1\n", "server.lisen");
  ExpectInvalid("limits: {max_prompt_byte: 10}\n", "limits.max_prompt_byte");
  ExpectInvalid("models:\n  m1:\n    max_bach: 2\n", "models.m1.max_bach");
}

// Found by tests/fuzz/config_fuzzer: a YAML key that is a sequence or mapping ("? [a]") threw out of
// the parser and took the daemon down.
TEST(ServerConfigTest, AKeyThatIsNotAPlainNameIsNamedNotThrown) {
  ExpectInvalid("limits:\n  ? [a, b]\n  : 3\n", "limits.?");
  ExpectInvalid("? {x: 1}\n: 2\n", "?");
  ExpectInvalid("models:\n  ? [tiny]\n  : {max_batch: 2}\n", "models");
}

TEST(ServerConfigTest, BadDurationIsNamed) {
  ExpectInvalid("server:\n  drain_timeout: soon\n", "server.drain_timeout");
}

TEST(ServerConfigTest, ZeroMaxBatchIsNamed) {
  ExpectInvalid("model_defaults:\n  max_batch: 0\n", "model_defaults.max_batch");
}

TEST(ServerConfigTest, NonIntegerMaxBatchIsNamed) {
  ExpectInvalid("model_defaults:\n  max_batch: many\n", "model_defaults.max_batch");
}

TEST(ServerConfigTest, ListenWithoutPortIsNamed) { ExpectInvalid("server:\n  listen: nohost\n", "server.listen"); }

TEST(ServerConfigTest, ListenWithBadPortIsNamed) {
  ExpectInvalid("server:\n  listen: 127.0.0.1:70000\n", "server.listen");
  ExpectInvalid("server:\n  listen: ':80'\n", "server.listen");
  ExpectInvalid("server:\n  metrics_listen: localhost:http\n", "server.metrics_listen");
}

TEST(ServerConfigTest, EmptyMetricsListenDisablesMetrics) {
  auto c = ParseServerConfig("server:\n  metrics_listen: ''\n", kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metrics_listen, "");
}

TEST(ServerConfigTest, UnavailableBackendIsNamed) { ExpectInvalid("runtime:\n  backend: tpu\n", "runtime.backend"); }

TEST(ServerConfigTest, NegativeLimitIsNamed) {
  ExpectInvalid("limits:\n  max_stop_strings: -1\n", "limits.max_stop_strings");
}

TEST(ServerConfigTest, DefaultMaxTokensAboveLimitIsNamed) {
  ExpectInvalid("model_defaults:\n  default_max_tokens: 500\n  max_tokens_limit: 100\n",
                "model_defaults.default_max_tokens");
  // Also when a per-model limit drops below the inherited default.
  ExpectInvalid("models:\n  m1:\n    max_tokens_limit: 64\n", "models.m1.default_max_tokens");
}

// Note [A model asleep] (profiler/model_execution.cc): idle_sleep and sleep_floor.
TEST(ServerConfigTest, SleepSettingsAreReadAndTheirMistakesNamed) {
  auto c = ParseServerConfig("models:\n  m1:\n    idle_sleep: 30s\n    sleep_floor: 0.25\n", kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->models.at("m1").idle_sleep_ms, 30000);
  EXPECT_EQ(c->models.at("m1").SleepFloorBytes(1000), 250);
  EXPECT_EQ(c->model_defaults.idle_sleep_ms, 0);  // never, by default
  ModelSettings bytes;
  bytes.sleep_floor = 3 << 20;
  EXPECT_EQ(bytes.SleepFloorBytes(8 << 20), 3 << 20);
  EXPECT_EQ(bytes.SleepFloorBytes(2 << 20), 2 << 20);  // never more than the budget
  ExpectInvalid("models:\n  m1:\n    sleep_floor: 5\n", "models.m1.sleep_floor");
  ExpectInvalid("models:\n  m1:\n    idle_sleep: 1s\n    policy: stock\n", "models.m1.idle_sleep");
  ExpectInvalid("model_defaults:\n  idle_sleep: -1s\n", "model_defaults.idle_sleep");
}

TEST(ServerConfigTest, SectionThatIsNotAMappingIsNamed) { ExpectInvalid("server: 5\n", "server"); }

TEST(ServerConfigTest, EmptyRepositoryPathIsNamed) { ExpectInvalid("repository:\n  path: ''\n", "repository.path"); }

TEST(ServerConfigTest, PerModelSettingsOverrideAndInheritDefaults) {
  // `models` comes first in the file: inheritance must not depend on key order.
  auto c = ParseServerConfig(
      "models: {m1: {max_batch: 3}, m2: {max_queue: 0, max_prefill_tokens: 512}}\n"
      "model_defaults:\n  max_batch: 5\n  max_queue: 10\n  default_max_tokens: 20\n  max_tokens_limit: 40\n",
      kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  const ModelSettings& m1 = c->SettingsFor("m1");
  EXPECT_EQ(m1.max_batch, 3);
  EXPECT_EQ(m1.max_queue, 10);
  EXPECT_EQ(m1.default_max_tokens, 20);
  EXPECT_EQ(m1.max_tokens_limit, 40);
  EXPECT_EQ(m1.max_prefill_tokens, 2048);
  const ModelSettings& m2 = c->SettingsFor("m2");
  EXPECT_EQ(m2.max_batch, 5);
  EXPECT_EQ(m2.max_queue, 0);
  EXPECT_EQ(m2.max_prefill_tokens, 512);
  const ModelSettings& other = c->SettingsFor("unlisted");
  EXPECT_EQ(other.max_batch, 5);
  EXPECT_EQ(other.max_queue, 10);
}

TEST(ServerConfigTest, DurationsTakeSuffixes) {
  const std::pair<const char*, int64_t> cases[] = {{"500ms", 500}, {"2m", 120000}, {"45s", 45000},
                                                   {"1.5s", 1500}, {"0", 0},       {"1h", 3600000}};
  for (const auto& [text, ms] : cases) {
    auto c = ParseServerConfig(std::string("server:\n  drain_timeout: ") + text + "\n", kOrigin);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    EXPECT_EQ(c->drain_timeout_ms, ms) << text;
  }
}

// "drain_timeout: 30" was read as 30 s without a word; a unit is required (0 needs none).
TEST(ServerConfigTest, ADurationWithoutAUnitIsRefused) {
  ExpectInvalid("server:\n  drain_timeout: 30\n", "server.drain_timeout");
  auto c = ParseServerConfig("server:\n  drain_timeout: 30\n", kOrigin);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("'30' has no unit (ms, s, m or h)"));
  ExpectInvalid("server:\n  tls: {reload_interval: 90}\n", "server.tls.reload_interval");
}

// Note [Duplicate keys]: yaml-cpp keeps the first of two entries of one key; the second (the edit) was
// ignored silently.
TEST(ServerConfigTest, AKeyGivenTwiceIsRefusedNamingIt) {
  ExpectInvalid("server:\n  listen: 127.0.0.1:1\n  listen: 127.0.0.1:2\n", "server.listen");
  ExpectInvalid("state_dir: a\nstate_dir: b\n", "state_dir");
  ExpectInvalid("models:\n  tiny-llama: {max_batch: 2}\n  tiny-llama: {max_batch: 4}\n", "models.tiny-llama");
  ExpectInvalid("models: {m: {max_batch: 2, max_batch: 3}}\n", "models.m.max_batch");
  auto c = ParseServerConfig("state_dir: a\nstate_dir: b\n", kOrigin);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "test.yaml: state_dir: given twice (a key may appear once in its mapping)");
}

TEST(ServerConfigTest, DurationOutOfRangeIsNamed) {
  ExpectInvalid("server:\n  drain_timeout: 2h\n", "server.drain_timeout");  // at most 1h
  ExpectInvalid("server:\n  drain_timeout: -5s\n", "server.drain_timeout");
}

TEST(ServerConfigTest, InvalidYamlNamesTheOrigin) {
  auto c = ParseServerConfig("server: [unclosed\n  listen: x\n", "my-config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("my-config.yaml"));
}

TEST(ServerConfigTest, LoadMissingFileIsNotFound) {
  testing::TempDir dir;
  const std::string path = dir.Sub("absent.yaml");
  auto c = LoadServerConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
}

TEST(ServerConfigTest, LoadReadsFileAndNamesItInErrors) {
  testing::TempDir dir;
  const std::string good = dir.Sub("good.yaml");
  std::ofstream(good) << "server:\n  listen: 127.0.0.1:0\n";
  auto c = LoadServerConfig(good);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "127.0.0.1:0");

  const std::string bad = dir.Sub("bad.yaml");
  std::ofstream(bad) << "server:\n  lisen: 127.0.0.1:0\n";
  auto b = LoadServerConfig(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr(bad));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("server.lisen"));
}

TEST(ServerConfigTest, ProfilingSettingsHaveDefaultsAndAreChecked) {
  auto c = ParseServerConfig(EmbeddedDefaultConfig(), kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpu, "h200-pcie5");
  EXPECT_TRUE(c->profiling);
  EXPECT_EQ(c->admin_token_file, "");
  EXPECT_EQ(c->model_defaults.policy, "autouvm");
  // Note [Budgets that hold together]: by default a share of what the reserve and explicit budgets leave.
  EXPECT_EQ(c->model_defaults.device_budget, 0);
  EXPECT_EQ(c->DeviceReserveBytes(1000), 50);
  auto fraction =
      ParseServerConfig("model_defaults: {device_budget: 0.9}\nruntime: {device_reserve: 1073741824}\n", kOrigin);
  ASSERT_TRUE(fraction.ok()) << fraction.status();
  EXPECT_EQ(fraction->model_defaults.DeviceBudgetBytes(1000), 900);  // a fraction of the GPU
  EXPECT_EQ(fraction->DeviceReserveBytes(1000), int64_t{1} << 30);   // bytes
  auto bytes = ParseServerConfig("models: {m: {device_budget: 4294967296, policy: stock}}\n", kOrigin);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->SettingsFor("m").DeviceBudgetBytes(1000), int64_t{4} << 30);  // bytes
  EXPECT_EQ(bytes->SettingsFor("m").policy, "stock");
  ExpectInvalid("model_defaults: {policy: fastest}\n", "model_defaults.policy");
  ExpectInvalid("models: {m: {device_budget: 12}}\n", "models.m.device_budget");
  ExpectInvalid("models: {m: {device_budget: -1}}\n", "models.m.device_budget");
  ExpectInvalid("runtime: {device_reserve: 12}\n", "runtime.device_reserve");
  ExpectInvalid("runtime: {gpu: h900}\n", "runtime.gpu");
  ExpectInvalid("profiler: {enabled: maybe}\n", "profiler.enabled");
  ExpectInvalid("admin: {token: x}\n", "admin.token");
  // runtime.compress_streamed (docs/weight-compression.md): off unless asked for, a boolean.
  EXPECT_FALSE(c->compress_streamed);
  auto coded = ParseServerConfig("runtime: {compress_streamed: true}\n", kOrigin);
  ASSERT_TRUE(coded.ok()) << coded.status();
  EXPECT_TRUE(coded->compress_streamed);
  ExpectInvalid("runtime: {compress_streamed: lots}\n", "runtime.compress_streamed");
  // runtime.cuda_graphs (Note [Captured steps], engine/step_graphs.cc): on by default, up to 32 rows.
  EXPECT_TRUE(c->cuda_graphs);
  EXPECT_EQ(c->cuda_graph_max_batch, 32);
  EXPECT_EQ(c->cuda_graph_max_tokens, 512);
  EXPECT_TRUE(c->cuda_graphs_streaming);
  auto streaming = ParseServerConfig("runtime: {cuda_graphs_streaming: false}\n", kOrigin);
  ASSERT_TRUE(streaming.ok()) << streaming.status();
  EXPECT_FALSE(streaming->cuda_graphs_streaming);
  ExpectInvalid("runtime: {cuda_graphs_streaming: sometimes}\n", "runtime.cuda_graphs_streaming");
  auto eager = ParseServerConfig("runtime: {cuda_graphs: false, cuda_graph_max_batch: 8}\n", kOrigin);
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_FALSE(eager->cuda_graphs);
  EXPECT_EQ(eager->cuda_graph_max_batch, 8);
  ExpectInvalid("runtime: {cuda_graph_max_batch: 0}\n", "runtime.cuda_graph_max_batch");
  auto no_packed = ParseServerConfig("runtime: {cuda_graph_max_tokens: 0}\n", kOrigin);
  ASSERT_TRUE(no_packed.ok()) << no_packed.status();
  EXPECT_EQ(no_packed->cuda_graph_max_tokens, 0);
  ExpectInvalid("runtime: {cuda_graph_max_tokens: -1}\n", "runtime.cuda_graph_max_tokens");
  ExpectInvalid("runtime: {cuda_graphs: often}\n", "runtime.cuda_graphs");
}

TEST(ServerConfigTest, TlsIsOffByDefaultAndItsFilesGoTogether) {
  auto c = ParseServerConfig(EmbeddedDefaultConfig(), kOrigin);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->tls.enabled());
  EXPECT_EQ(c->tls.reload_interval_ms, 60000);
  auto mtls = ParseServerConfig(
      "server: {tls: {cert_file: s.pem, key_file: s.key, client_ca_file: ca.pem, require_client_cert: true, "
      "reload_interval: 5m}}\n",
      kOrigin);
  ASSERT_TRUE(mtls.ok()) << mtls.status();
  EXPECT_TRUE(mtls->tls.enabled());
  EXPECT_EQ(mtls->tls.key_file, "s.key");
  EXPECT_EQ(mtls->tls.client_ca_file, "ca.pem");
  EXPECT_TRUE(mtls->tls.require_client_cert);
  EXPECT_EQ(mtls->tls.reload_interval_ms, 300000);
  ExpectInvalid("server: {tls: {cert_file: s.pem}}\n", "server.tls.key_file");
  ExpectInvalid("server: {tls: {key_file: s.key}}\n", "server.tls.cert_file");
  ExpectInvalid("server: {tls: {client_ca_file: ca.pem}}\n", "server.tls.client_ca_file");
  ExpectInvalid("server: {tls: {cert_file: s.pem, key_file: s.key, require_client_cert: true}}\n",
                "server.tls.require_client_cert");
  ExpectInvalid("server: {tls: {cert_file: s.pem, key_file: s.key, reload_interval: 10ms}}\n",
                "server.tls.reload_interval");
  ExpectInvalid("server: {tls: {certificate: s.pem}}\n", "server.tls.certificate");
  ExpectInvalid("server: {tls: on}\n", "server.tls");
}

}  // namespace
}  // namespace autouvm::server
