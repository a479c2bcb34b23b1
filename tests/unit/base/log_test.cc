#include "base/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace autouvm::base {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n', absl::SkipEmpty()); }

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { InitLogging({}); }
};

TEST_F(LogTest, TextLinesCarryTimeLevelMessageAndContext) {
  InitLogging({.level = LogLevel::kInfo, .format = LogFormat::kText});
  ::testing::internal::CaptureStderr();
  AUTOUVM_LOG(INFO) << "model "
                    << "m1"
                    << " ready";
  AUTOUVM_LOG(WARNING).Model("m1").Request("req-7") << "the client went away";
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], MatchesRegex(R"(\[20[0-9-]+ [0-9:.]+\] \[info\] autouvmd: model m1 ready)"));
  EXPECT_THAT(lines[1],
              MatchesRegex(R"(\[.*\] \[warning\] autouvmd: the client went away \[model=m1 request_id=req-7\])"));
}

TEST_F(LogTest, JsonLinesAreOneObjectEachWithTheirFields) {
  InitLogging({.level = LogLevel::kDebug, .format = LogFormat::kJson});
  ::testing::internal::CaptureStderr();
  AUTOUVM_LOG(DEBUG) << "a \"quoted\" line\nwith a newline";
  AUTOUVM_LOG(ERROR).Model("m2").Request("req-1") << "bad bytes: \xff\xfe";
  const std::vector<std::string> lines = Lines(::testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 2u);  // the message's newline is escaped, not a second line
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["level"], "debug");
  EXPECT_EQ(first["message"], "a \"quoted\" line\nwith a newline");
  EXPECT_THAT(first["time"].get<std::string>(), MatchesRegex(R"(20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{6}Z)"));
  EXPECT_FALSE(first.contains("model"));
  const auto second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second["level"], "error");
  EXPECT_EQ(second["model"], "m2");
  EXPECT_EQ(second["request_id"], "req-1");
  EXPECT_THAT(second["message"].get<std::string>(), HasSubstr("bad bytes: "));  // invalid UTF-8 replaced
}

TEST_F(LogTest, LinesBelowTheLevelAreNotEvenFormatted) {
  InitLogging({.level = LogLevel::kWarning});
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  AUTOUVM_LOG(INFO) << "hidden " << count();
  AUTOUVM_LOG(DEBUG) << "hidden " << count();
  AUTOUVM_LOG(WARNING) << "shown " << count();
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_THAT(out, HasSubstr("shown 1"));
  EXPECT_THAT(out, Not(HasSubstr("hidden")));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
}

TEST_F(LogTest, LevelsAndFormatsParseOrNameTheChoices) {
  LogLevel level = LogLevel::kInfo;
  ASSERT_TRUE(ParseLogLevel("debug", &level).ok());
  EXPECT_EQ(level, LogLevel::kDebug);
  ASSERT_TRUE(ParseLogLevel("warn", &level).ok());
  EXPECT_EQ(level, LogLevel::kWarning);
  const absl::Status bad = ParseLogLevel("loud", &level);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "'loud' is not a log level (debug, info, warning or error)");
  LogFormat format = LogFormat::kText;
  ASSERT_TRUE(ParseLogFormat("json", &format).ok());
  EXPECT_EQ(format, LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("yaml", &format).message(), "'yaml' is not a log format (text or json)");
}

TEST(CheckDeathTest, ABrokenInvariantStopsTheProcessNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int slots = 3;
  EXPECT_DEATH(AUTOUVM_CHECK(slots < 2) << "slots: " << slots,
               R"(\[fatal\] autouvmd: CHECK failed: slots < 2 at .*log_test\.cc:[0-9]+: slots: 3)");
  EXPECT_DEATH(AUTOUVM_CHECK_EQ(slots, 4) << "after admission",
               R"(CHECK failed: slots == 4 at .*\(3 vs 4\) after admission)");
}

TEST(CheckDeathTest, AHeldInvariantCostsNothingAndEvaluatesOnce) {
  int evaluated = 0;
  AUTOUVM_CHECK(++evaluated == 1) << "never formatted";
  AUTOUVM_CHECK_LE(++evaluated, 2);
  EXPECT_EQ(evaluated, 2);
}

}  // namespace
}  // namespace autouvm::base
