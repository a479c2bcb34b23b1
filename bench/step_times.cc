// offload_bench's step statistics (bench/step_times.h): the host's speed before each step, every step's
// time, pooled runs, and steps that move nothing compared at equal host speed.
#include "bench/step_times.h"

#include <c10/cuda/CUDAGuard.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "bench/bench_util.h"

namespace autouvm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Pearson's r of step times against one of the host's speeds (0 when either does not vary).
double Correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 3) return 0;
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) ma += a[i] / n, mb += b[i] / n;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0;
}

}  // namespace

HostSpeed ProbeHostSpeed(at::Tensor& scratch, const c10::cuda::CUDAStream& side) {
  HostSpeed h;
  h.cpu = sched_getcpu();
  const auto t0 = Clock::now();
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 400000; ++i) x = (x * 6364136223846793005ULL + 1442695040888963407ULL) ^ (x >> 29);
  static volatile uint64_t sink;
  sink = x;
  h.cpu_ms = 1e3 * Seconds(t0, Clock::now());
  constexpr int kOps = 64;
  c10::cuda::CUDAStreamGuard guard(side);
  const auto t1 = Clock::now();
  for (int i = 0; i < kOps; ++i) scratch.add_(1.0);
  h.dispatch_us = 1e6 * Seconds(t1, Clock::now()) / kOps;
  return h;
}

// Steps that move nothing depend on the host's speed alone: how closely they follow it, then each
// policy's steps against the resident ones at the same speed (dispatch probe rounded to the µs), with
// the simulator's step — which models one host speed — beside every level.
void PrintByHostSpeed(int64_t batch, const std::vector<IdleStep>& idle, double sim_s) {
  if (idle.empty()) return;
  std::vector<double> step, cpu, dispatch;
  std::vector<std::string> who = {"resident"};
  std::map<std::pair<int, std::string>, std::vector<double>> at;  // (level, who) -> step times
  std::map<int, std::vector<double>> level_steps;
  for (const IdleStep& i : idle) {
    step.push_back(i.step_s);
    cpu.push_back(i.speed.cpu_ms);
    dispatch.push_back(i.speed.dispatch_us);
    if (std::find(who.begin(), who.end(), i.who) == who.end()) who.push_back(i.who);
    const int level = static_cast<int>(std::lround(i.speed.dispatch_us));
    at[{level, i.who}].push_back(i.step_s);
    level_steps[level].push_back(i.step_s);
  }
  std::printf(
      "\nsteps that move nothing (resident, factor <= 1.0), batch %lld: %zu; step time against the host's speed "
      "before it: r = %.2f (CPU work, median %.3f ms), r = %.2f (dispatch, median %.2f us per op)\n",
      (long long)batch, step.size(), Correlation(step, cpu), Median(cpu), Correlation(step, dispatch),
      Median(dispatch));
  std::printf("\n| batch | dispatch us per op |");
  for (const std::string& w : who)
    std::printf(" %s ms (steps)%s |", w.c_str(), w == "resident" ? "" : ", resident / it");
  std::printf(" sim ms | sim / all steps' median |\n|---|---|");
  for (size_t k = 0; k < who.size() + 2; ++k) std::printf("---|");
  std::printf("\n");
  for (const auto& [level, steps] : level_steps) {
    std::printf("| %lld | %d |", (long long)batch, level);
    const auto resident = at.find({level, "resident"});
    for (const std::string& w : who) {
      const auto it = at.find({level, w});
      if (it == at.end()) {
        std::printf(" - |");
      } else if (w == "resident" || resident == at.end()) {
        std::printf(" %.2f (%zu) |", 1e3 * Median(it->second), it->second.size());
      } else {
        std::printf(" %.2f (%zu), %.0f%% |", 1e3 * Median(it->second), it->second.size(),
                    100 * Median(resident->second) / Median(it->second));
      }
    }
    std::printf(" %.2f | %.2f |\n", 1e3 * sim_s, sim_s / Median(steps));
  }
  std::fflush(stdout);
}

// With the wall-clock time the first step began (to line up with a clock log such as nvidia-smi's), and
// the host's speed before each step.
void PrintStepTimes(const std::string& what, const std::vector<double>& times, const std::vector<HostSpeed>& speeds) {
  double total = 0;
  for (const double t : times) total += t;
  const auto began = std::chrono::system_clock::now() - std::chrono::duration<double>(total);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(began.time_since_epoch()).count();
  const std::time_t sec = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&sec, &utc);
  std::printf("  step times ms (%s, from %02d:%02d:%02d.%03lld UTC):", what.c_str(), utc.tm_hour, utc.tm_min,
              utc.tm_sec, static_cast<long long>(ms % 1000));
  for (const double t : times) std::printf(" %.2f", 1e3 * t);
  std::printf("\n  host before each step, CPU work ms:");
  for (const HostSpeed& h : speeds) std::printf(" %.3f", h.cpu_ms);
  std::printf("\n  host before each step, dispatch us per op:");
  for (const HostSpeed& h : speeds) std::printf(" %.2f", h.dispatch_us);
  std::printf("\n  host before each step, CPU:");
  for (const HostSpeed& h : speeds) std::printf(" %d", h.cpu);
  std::printf("\n");
}

// When policies ran more than once: every run's steady steps pooled, against the resident runs'. The
// host's dispatch of a step that moves nothing varies by 2x between runs on the GPU host (a VM), so
// one run's median says little there; the pooled median and the best run's median (the resident
// floor's own statistic) compare like with like.
void PrintPooled(const std::string& preset, int64_t batch, const std::vector<std::vector<double>>& resident_runs,
                 const std::map<std::pair<double, std::string>, std::vector<std::vector<double>>>& runs_of) {
  if (std::none_of(runs_of.begin(), runs_of.end(), [](const auto& e) { return e.second.size() > 1; })) return;
  struct Pooled {
    size_t runs = 0, steps = 0;
    double median = 0, best = 0;
  };
  auto pool = [](const std::vector<std::vector<double>>& runs) {
    Pooled p{.runs = runs.size(), .best = 1e9};
    std::vector<double> all;
    for (const auto& r : runs) {
      all.insert(all.end(), r.begin(), r.end());
      p.best = std::min(p.best, Median(r));
    }
    p.steps = all.size();
    p.median = Median(all);
    return p;
  };
  const Pooled resident = pool(resident_runs);
  std::printf(
      "\n| model | batch | factor | policy | runs | steady steps | pooled median ms | best run median ms | "
      "resident pooled / pooled | resident best / best |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %lld | - | resident | %zu | %zu | %.2f | %.2f | - | - |\n", preset.c_str(), (long long)batch,
              resident.runs, resident.steps, 1e3 * resident.median, 1e3 * resident.best);
  for (const auto& [key, runs] : runs_of) {
    const Pooled p = pool(runs);
    std::printf("| %s | %lld | %.2f | %s | %zu | %zu | %.2f | %.2f | %.0f%% | %.0f%% |\n", preset.c_str(),
                (long long)batch, key.first, key.second.c_str(), p.runs, p.steps, 1e3 * p.median, 1e3 * p.best,
                100 * resident.median / p.median, 100 * resident.best / p.best);
  }
  std::fflush(stdout);
}

void PrintOpSplit(const std::string& policy, const std::string& step, const std::string& crossing,
                  const runtime::TimeSplit& split, const ExplicitOffload* offload) {
  std::printf("  op times (%s, %s): GPU %.2f ms; ops reading %s %.2f ms for %.2f GiB (%.1f GB/s); other ops %.2f ms",
              policy.c_str(), step.c_str(), 1e3 * split.total_s, crossing.c_str(), 1e3 * split.remote_ops_s,
              split.remote_read_bytes / kGiB, split.remote_bytes_per_second() / 1e9, 1e3 * split.other_ops_s);
  if (offload != nullptr) {
    const auto copies = offload->LastStepCopies();
    std::printf("; copy engine busy %.2f ms (%.1f GB/s) over %.2f ms", 1e3 * copies.busy_s,
                offload->offloaded_bytes() / std::max(copies.busy_s, 1e-9) / 1e9, 1e3 * copies.span_s);
  }
  std::printf("\n");
}

}  // namespace autouvm::bench
