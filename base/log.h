// Logging: the product's one way to say something on stderr, through spdlog.
//
//   base::InitLogging({.level = base::LogLevel::kInfo, .format = base::LogFormat::kJson});  // main, once
//   AUTOUVM_LOG(INFO) << "model " << name << " ready";
//   AUTOUVM_LOG(WARNING).Model(name).Request(id) << "the client went away";
//
// A line carries its time (UTC), level and message, and the model and request id when given:
//   text: [2026-12-01 12:26:47.123] [info] autouvmd: model tiny-llama ready [model=tiny-llama]
//   json: {"time":"2026-12-01T12:26:47.123456Z","level":"info","message":"...","model":"tiny-llama"}
// The JSON form (one object per line) is for log collectors (Kubernetes); text is the default. Lines
// below the level are not formatted at all. Before InitLogging: text at info.
//
// Thread-safe: lines from several threads come out whole, one after another.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace autouvm::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };
enum class LogFormat { kText, kJson };

struct LogOptions {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
};

// Replaces the process's logging options (the daemon's main; tests that check the output).
void InitLogging(const LogOptions& options);
bool LogEnabled(LogLevel level);

// "debug", "info", "warning" (or "warn"), "error"; INVALID_ARGUMENT naming the choices otherwise.
absl::Status ParseLogLevel(std::string_view text, LogLevel* out);
// "text" or "json".
absl::Status ParseLogFormat(std::string_view text, LogFormat* out);

// One line being written; AUTOUVM_LOG makes it, its destructor writes it.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  LogLine& Model(std::string_view model) {
    model_ = model;
    return *this;
  }
  LogLine& Request(std::string_view request_id) {
    request_ = request_id;
    return *this;
  }
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::string model_;
  std::string request_;
  std::ostringstream stream_;
};

// Gives AUTOUVM_LOG's two branches one type (void), so that it is one expression.
struct LogVoidify {
  void operator&(const LogLine&) {}
};

}  // namespace autouvm::base

// AUTOUVM_LOG(DEBUG|INFO|WARNING|ERROR) << ...; nothing is evaluated below the level. (Not LOG: libtorch's
// c10 defines a LOG macro of its own.)
#define AUTOUVM_LOG_LEVEL_DEBUG ::autouvm::base::LogLevel::kDebug
#define AUTOUVM_LOG_LEVEL_INFO ::autouvm::base::LogLevel::kInfo
#define AUTOUVM_LOG_LEVEL_WARNING ::autouvm::base::LogLevel::kWarning
#define AUTOUVM_LOG_LEVEL_ERROR ::autouvm::base::LogLevel::kError
#define AUTOUVM_LOG(severity)                                \
  !::autouvm::base::LogEnabled(AUTOUVM_LOG_LEVEL_##severity) \
      ? (void)0                                              \
      : ::autouvm::base::LogVoidify() & ::autouvm::base::LogLine(AUTOUVM_LOG_LEVEL_##severity)
