#include "runtime/op_timer.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace autouvm::runtime {

OpTimer::OpTimer(DeviceBackend* backend, int64_t every, Span span, double min_interval_seconds,
                 std::function<double()> now)
    : backend_(backend),
      every_(std::max<int64_t>(1, every)),
      span_(span),
      min_interval_seconds_(std::max(0.0, min_interval_seconds)),
      now_(now != nullptr ? std::move(now) : [] { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }) {}

void OpTimer::BeginIteration() {
  // The first iteration, then the first one both `every` iterations and the interval after the last.
  const bool first = iterations_++ == 0;
  timing_ = first || since_sampled_ + 1 >= every_;
  if (timing_ && !first && min_interval_seconds_ > 0) timing_ = now_() - last_sampled_at_ >= min_interval_seconds_;
  if (timing_) {
    since_sampled_ = 0;
    if (min_interval_seconds_ > 0) last_sampled_at_ = now_();
  } else {
    ++since_sampled_;
  }
  marks_.clear();
}

void OpTimer::BeforeOp(int64_t index) {
  if (timing_) marks_.push_back({.op = index, .before = backend_->RecordTimedEvent(Stream::kCompute)});
}

void OpTimer::OnOp(const OpEvent& op) {
  if (!timing_ || span_ != Span::kOwn || marks_.empty() || marks_.back().op != op.index) return;
  marks_.back().after = backend_->RecordTimedEvent(Stream::kCompute);
}

absl::StatusOr<std::vector<double>> OpTimer::EndIteration() {
  if (!timing_) return std::vector<double>();
  timing_ = false;
  ++sampled_;
  if (marks_.empty()) return std::vector<double>();
  const EventId end = backend_->RecordTimedEvent(Stream::kCompute);
  std::vector<double> seconds(static_cast<size_t>(marks_.back().op + 1), 0.0);
  for (size_t k = 0; k < marks_.size(); ++k) {
    const EventId next = marks_[k].after >= 0 ? marks_[k].after : k + 1 < marks_.size() ? marks_[k + 1].before : end;
    auto s = backend_->ElapsedSeconds(marks_[k].before, next);
    if (!s.ok()) return s.status();
    seconds[static_cast<size_t>(marks_[k].op)] = *s;
  }
  marks_.clear();
  return seconds;
}

TimeSplit SplitTime(const AccessTrace& trace, const std::vector<double>& op_seconds,
                    const std::vector<std::string>& remote_ids) {
  const std::unordered_set<std::string> remote(remote_ids.begin(), remote_ids.end());
  TimeSplit split;
  for (size_t i = 0; i < op_seconds.size() && i < trace.ops.size(); ++i) {
    split.total_s += op_seconds[i];
    int64_t read = 0;
    bool reads_remote = false;
    for (const TensorUse& u : trace.ops[i].reads) {
      if (remote.count(u.id)) {
        reads_remote = true;
        read += u.bytes;
      }
    }
    if (reads_remote) {
      split.remote_ops_s += op_seconds[i];
      split.remote_read_bytes += read;
    } else {
      split.other_ops_s += op_seconds[i];
    }
  }
  return split;
}

}  // namespace autouvm::runtime
