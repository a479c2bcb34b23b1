#include "tests/e2e/prometheus_process.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/testing/subprocess.h"

namespace autouvm::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return bound ? ntohs(addr.sin_port) : 0;
}

PrometheusProcess::PrometheusProcess(const std::string& target) {
  port_ = FreePort();
  std::ofstream(dir_.Sub("prometheus.yml")) << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                            << "scrape_configs:\n"
                                            << "  - job_name: autouvmd\n"
                                            << "    static_configs: [{targets: ['" << target << "']}]\n";
  pid_ = Spawn(
      {"/usr/bin/prometheus", "--config.file=" + dir_.Sub("prometheus.yml"), "--storage.tsdb.path=" + dir_.Sub("data"),
       "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"},
      dir_.Sub("out.log"), dir_.Sub("err.log"));
}

PrometheusProcess::~PrometheusProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    WaitExit(&pid_, 30);
  }
}

bool PrometheusProcess::Ready() {
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Get("/-/ready");
  return r && r->status == 200;
}

std::optional<std::vector<double>> PrometheusProcess::Query(const std::string& expr) {
  httplib::Client c("127.0.0.1", port_);
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
  if (!r || r->status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || j.value("status", "") != "success") return std::nullopt;
  std::vector<double> out;
  for (const auto& series : j["data"]["result"]) out.push_back(std::stod(series["value"][1].get<std::string>()));
  return out;
}

double PrometheusProcess::Sum(const std::string& expr) {
  auto v = Query(expr);
  if (!v || v->empty()) return -1;
  double s = 0;
  for (double x : *v) s += x;
  return s;
}

std::string PrometheusProcess::Log() const { return ReadFile(dir_.Sub("err.log")); }

}  // namespace autouvm::testing
