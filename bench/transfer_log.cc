// offload_bench's --transfer-times (bench/transfer_log.h): a step's transfers, timed by stream and direction.
#include "bench/transfer_log.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace autouvm::bench {
namespace {

using Interval = std::pair<double, double>;

// Sorts and merges overlapping intervals.
std::vector<Interval> Union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

double Length(const std::vector<Interval>& merged) {
  double t = 0;
  for (const Interval& i : merged) t += i.second - i.first;
  return t;
}

// The length of the intersection of two merged interval lists.
double Overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double t = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    t += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    (a[i].second < b[j].second ? i : j)++;
  }
  return t;
}

}  // namespace

void TransferLog::Arm() {
  calls_.clear();
  start_ = inner_->RecordTimedEvent(runtime::Stream::kCompute);
  armed_ = true;
}

template <typename Transfer>
absl::Status TransferLog::Log(What what, runtime::Stream stream, int64_t bytes, Transfer transfer) {
  if (!armed_) return transfer();
  Call c{what, stream, bytes, inner_->RecordTimedEvent(stream), -1, 0};
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = transfer();
  c.host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.after = inner_->RecordTimedEvent(stream);
  calls_.push_back(c);
  return s;
}

absl::Status TransferLog::Prefetch(uint64_t addr, int64_t bytes, runtime::Location to, runtime::Stream stream) {
  return Log(to == runtime::Location::kDevice ? What::kToDevice : What::kToHost, stream, bytes,
             [&] { return inner_->Prefetch(addr, bytes, to, stream); });
}

absl::Status TransferLog::Discard(uint64_t addr, int64_t bytes, runtime::Stream stream) {
  return Log(What::kDiscard, stream, bytes, [&] { return inner_->Discard(addr, bytes, stream); });
}

absl::Status TransferLog::StageIn(uint64_t addr, int64_t bytes, runtime::Stream stream) {
  return Log(What::kStageIn, stream, bytes, [&] { return inner_->StageIn(addr, bytes, stream); });
}

absl::Status TransferLog::StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, runtime::Stream stream) {
  return Log(What::kStageIn, stream, bytes, [&] { return inner_->StageInto(addr, bytes, device_addr, stream); });
}

absl::StatusOr<TransferSummary> TransferLog::Summarize() {
  armed_ = false;
  std::vector<Call> calls = std::move(calls_);
  calls_.clear();
  TransferSummary s;
  std::map<std::pair<What, runtime::Stream>, std::vector<Interval>> by_kind;
  std::map<std::pair<What, runtime::Stream>, TransferKind> kinds;
  std::map<Direction, std::vector<Interval>> by_direction;
  for (const Call& c : calls) {
    ASSIGN_OR_RETURN(const double from, inner_->ElapsedSeconds(start_, c.before));
    ASSIGN_OR_RETURN(const double to, inner_->ElapsedSeconds(start_, c.after));
    const auto key = std::make_pair(c.what, c.stream);
    by_kind[key].push_back({from, to});
    TransferKind& k = kinds[key];
    if (k.name.empty()) {
      k.direction = c.what == What::kToHost    ? Direction::kToHost
                    : c.what == What::kDiscard ? Direction::kNeither
                                               : Direction::kToDevice;
      static constexpr const char* kWhat[] = {"to device", "to host", "discard", "staged copy in"};
      k.name = absl::StrCat(kWhat[static_cast<int>(c.what)], " (",
                            c.stream == runtime::Stream::kCompute ? "compute" : "copy", ")");
    }
    ++k.calls;
    k.bytes += c.bytes;
    k.host_s += c.host_s;
    k.largest_s = std::max(k.largest_s, to - from);
    s.span_s = std::max(s.span_s, to);
    by_direction[k.direction].push_back({from, to});
  }
  for (auto& [key, k] : kinds) {
    k.busy_s = Length(Union(by_kind[key]));
    s.kinds.push_back(std::move(k));
  }
  s.both_directions_s =
      Overlap(Union(std::move(by_direction[Direction::kToHost])), Union(std::move(by_direction[Direction::kToDevice])));
  return s;
}

double TransferSummary::rate(Direction direction) const {
  int64_t bytes = 0;
  double busy = 0;
  for (const TransferKind& k : kinds) {
    if (k.direction == direction) bytes += k.bytes, busy += k.busy_s;
  }
  return busy > 0 ? bytes / busy : 0;
}

std::string FormatTransfers(const std::string& what, const TransferSummary& s, bool host_times) {
  std::string out = absl::StrFormat(
      "\n%s: transfers from the step's start to its last transfer's end, %.1f ms; both directions under way "
      "at once %.1f ms\n\n| transfer (stream) | calls | GiB | busy ms | GB/s while busy | host ms in calls | "
      "longest call ms |\n|---|---:|---:|---:|---:|---:|---:|\n",
      what, 1e3 * s.span_s, 1e3 * s.both_directions_s);
  for (const TransferKind& k : s.kinds) {
    absl::StrAppendFormat(&out, "| %s | %lld | %.2f | %.1f | %.1f | %s | %.2f |\n", k.name,
                          static_cast<long long>(k.calls), k.bytes / double(1 << 30), 1e3 * k.busy_s, k.rate() / 1e9,
                          host_times ? absl::StrFormat("%.1f", 1e3 * k.host_s) : "-", 1e3 * k.largest_s);
  }
  return out;
}

std::string FormatStepsAtTheirRate(const std::string& policy, const std::vector<double>& times,
                                   const std::vector<TransferSummary>& transfers,
                                   const std::function<double(double to_host_bytes_per_s)>& simulate) {
  std::string out = absl::StrFormat(
      "\n%s, steady steps at their own device-to-host rate\n\n| step | ms | to host GB/s | to device GB/s | both "
      "directions ms | sim ms at that rate | sim / step |\n|---|---:|---:|---:|---:|---:|---:|\n",
      policy);
  for (size_t k = 0; k < transfers.size() && k + 1 < times.size(); ++k) {
    const TransferSummary& t = transfers[k];
    const double rate = t.rate(Direction::kToHost);
    const double sim = rate > 0 ? simulate(rate) : 0;
    const double step = times[k + 1];
    absl::StrAppendFormat(&out, "| %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", k + 1, 1e3 * step, rate / 1e9,
                          t.rate(Direction::kToDevice) / 1e9, 1e3 * t.both_directions_s, 1e3 * sim,
                          step > 0 ? sim / step : 0.0);
  }
  return out;
}

}  // namespace autouvm::bench
