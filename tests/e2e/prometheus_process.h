// PrometheusProcess: a real Prometheus (Debian's /usr/bin/prometheus) for a test, scraping one target
// every second on a free loopback port, queried through its HTTP API.
//
//   PrometheusProcess prom(metrics_address);
//   ASSERT_TRUE(Eventually([&] { return prom.Ready(); })) << prom.Log();
//   EXPECT_EQ(prom.Sum("autouvm_requests_total{code=\"OK\"}"), 3);
//
// Not thread-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tests/testing/temp_dir.h"

namespace autouvm::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (0 if none could be had).
int FreePort();

class PrometheusProcess {
 public:
  explicit PrometheusProcess(const std::string& target);
  ~PrometheusProcess();  // SIGTERM, then waits

  bool Ready();
  // The instant vector `expr` evaluates to: each series' value; nullopt if the query failed.
  std::optional<std::vector<double>> Query(const std::string& expr);
  // The sum of `expr`'s series, or -1 when it has none.
  double Sum(const std::string& expr);
  std::string Log() const;  // its stderr

 private:
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace autouvm::testing
