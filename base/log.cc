#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "nlohmann/json.hpp"

namespace autouvm::base {
namespace {

// Note [One logger]: the process has one spdlog logger, made on first use (so that library code and
// tests log before, or without, InitLogging) and reconfigured by InitLogging. Its pattern is the
// message alone: LogLine renders time, level and context itself, so text and JSON come from one place.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<LogFormat> g_format{LogFormat::kText};

spdlog::logger& Logger() {
  static spdlog::logger* logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* l = new spdlog::logger("autouvmd", sink);  // never destroyed: threads may log during exit
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);  // a line is on stderr when its statement ends
    return l;
  }();
  return *logger;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kFatal:
      return "fatal";
  }
  return "info";
}

std::string Render(LogLevel level, const std::string& model, const std::string& request, const std::string& message) {
  const absl::Time now = absl::Now();
  if (g_format.load(std::memory_order_relaxed) == LogFormat::kJson) {
    nlohmann::json j;
    j["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", now, absl::UTCTimeZone());
    j["level"] = LevelName(level);
    j["message"] = message;
    if (!model.empty()) j["model"] = model;
    if (!request.empty()) j["request_id"] = request;
    // Invalid UTF-8 (a client's text quoted in a message) is replaced, not thrown.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line = absl::StrCat("[", absl::FormatTime("%Y-%m-%d %H:%M:%E3S", now, absl::UTCTimeZone()), "] [",
                                  LevelName(level), "] autouvmd: ", message);
  if (!model.empty() || !request.empty()) {
    absl::StrAppend(&line, " [");
    if (!model.empty()) absl::StrAppend(&line, "model=", model);
    if (!request.empty()) absl::StrAppend(&line, model.empty() ? "" : " ", "request_id=", request);
    absl::StrAppend(&line, "]");
  }
  return line;
}

void Write(LogLevel level, const std::string& line) {
  static const spdlog::level::level_enum kSpd[] = {spdlog::level::debug, spdlog::level::info, spdlog::level::warn,
                                                   spdlog::level::err, spdlog::level::critical};
  Logger().log(kSpd[static_cast<int>(level)], "{}", line);
}

}  // namespace

void InitLogging(const LogOptions& options) {
  g_level.store(static_cast<int>(options.level), std::memory_order_relaxed);
  g_format.store(options.format, std::memory_order_relaxed);
  Logger();
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed); }

absl::Status ParseLogLevel(std::string_view text, LogLevel* out) {
  if (text == "debug") {
    *out = LogLevel::kDebug;
  } else if (text == "info") {
    *out = LogLevel::kInfo;
  } else if (text == "warning" || text == "warn") {
    *out = LogLevel::kWarning;
  } else if (text == "error") {
    *out = LogLevel::kError;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text), "' is not a log level (debug, info, warning or error)"));
  }
  return absl::OkStatus();
}

absl::Status ParseLogFormat(std::string_view text, LogFormat* out) {
  if (text == "text") {
    *out = LogFormat::kText;
  } else if (text == "json") {
    *out = LogFormat::kJson;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' is not a log format (text or json)"));
  }
  return absl::OkStatus();
}

LogLine::~LogLine() { Write(level_, Render(level_, model_, request_, stream_.str())); }

CheckFailure::CheckFailure(const char* condition, const char* file, int line) {
  stream_ << "CHECK failed: " << condition << " at " << file << ":" << line << ": ";
}

CheckFailure::~CheckFailure() {
  Write(LogLevel::kFatal, Render(LogLevel::kFatal, "", "", stream_.str()));
  std::abort();
}

}  // namespace autouvm::base
