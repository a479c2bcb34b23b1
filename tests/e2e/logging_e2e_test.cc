// End-to-end: what the daemon writes to stderr, in each --log-format (docs/configuration.md, "Logs").
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

// Starts a daemon with `args`, serves one request, stops it with SIGTERM; its stderr, line by line.
std::vector<std::string> OneRequestsLog(const std::vector<std::string>& args) {
  DaemonProcess d({.extra_args = args});
  EXPECT_TRUE(d.Start()) << d.Log();
  EXPECT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_TRUE(CallGenerate(d, GreedyRequest("tiny-llama", "Hello", 4)).ok());
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(), 0) << d.Log();
  return absl::StrSplit(d.Log(), '\n', absl::SkipEmpty());
}

TEST(LoggingE2E, JsonFormatWritesOneObjectPerLineWithTheModel) {
  const std::vector<std::string> lines = OneRequestsLog({"--log-format", "json"});
  ASSERT_FALSE(lines.empty());
  bool ready = false, draining = false;
  for (const std::string& line : lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << "not one JSON object: " << line;
    ASSERT_TRUE(j.is_object()) << line;
    for (const char* key : {"time", "level", "message"}) ASSERT_TRUE(j.contains(key)) << key << " missing: " << line;
    const std::string message = j["message"];
    if (message.rfind("model tiny-llama ready", 0) == 0) {
      ready = true;
      EXPECT_EQ(j["level"], "info");
      EXPECT_EQ(j.value("model", ""), "tiny-llama") << line;
    }
    draining |= message.rfind("draining", 0) == 0;
  }
  EXPECT_TRUE(ready) << "no \"model tiny-llama ready\" line";
  EXPECT_TRUE(draining) << "no \"draining\" line";
}

TEST(LoggingE2E, TextIsTheDefaultAndTheLevelDropsWhatIsBelowIt) {
  const std::vector<std::string> text = OneRequestsLog({});
  bool ready = false;
  for (const std::string& line : text) {
    ready |= line.find("] [info] autouvmd: model tiny-llama ready (") != std::string::npos &&
             line.find("[model=tiny-llama]") != std::string::npos && line[0] == '[';
  }
  EXPECT_TRUE(ready) << absl::StrJoin(text, "\n");
  // At warning, a clean start, request and stop has nothing to say.
  const std::vector<std::string> quiet = OneRequestsLog({"--log-level", "warning"});
  EXPECT_TRUE(quiet.empty()) << absl::StrJoin(quiet, "\n");
}

}  // namespace
}  // namespace autouvm::testing
