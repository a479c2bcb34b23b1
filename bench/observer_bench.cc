// observer_bench: what the Observer costs. Times decode steps of a generated Llama model with no
// observer, with an Observer installed (its global callback runs for every op) outside any iteration,
// in observed iterations (op boundaries only) and while recording, and prints a table (per step and
// per counted op).
//
//   build/bench/observer_bench --dim 256 --layers 4 --steps 200
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench_model.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/observer.h"

namespace {

using autouvm::engine::ModelRunner;

// Median seconds per decode step over `steps` steps; `around` wraps each step (begin/end recording).
template <typename Around>
double TimeSteps(ModelRunner* runner, int steps, Around around) {
  std::vector<double> times;
  std::vector<float> logits;
  for (int i = 0; i < steps; ++i) {
    ModelRunner::DecodeRow row{0, 65 + i % 26, 8 + i % 64};
    const auto t0 = std::chrono::steady_clock::now();
    around([&] {
      if (!runner->Decode({&row, 1}, &logits).ok()) std::abort();
    });
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// Seconds per op of `n` additions of one-element tensors: what the callbacks add to the cheapest op.
double TinyOpSeconds(int n) {
  at::Tensor a = at::ones({1}), b = at::ones({1});
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) a = at::add(a, b);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  auto c = autouvm::engine::DefaultTinyModelConfig("observer-bench");
  int steps = 200;
  int rounds = 5;
  CLI::App app{"Decode-step time with and without access-trace recording"};
  autouvm::bench::AddModelFlags(app, &c);
  app.add_option("--steps", steps, "decode steps per mode and round")->capture_default_str();
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  autouvm::bench::FinishModelFlags(&c);
  c.max_seq = 128;

  autouvm::runtime::Observer::MakeExecutionRepeatable();
  auto runner = autouvm::bench::MakeBenchRunner(c, 1);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n", std::string(runner.status().message()).c_str());
    return 1;
  }
  if (!(*runner)->Prefill(0, std::vector<int32_t>{256, 1, 2, 3, 4, 5, 6, 7}).ok()) return 1;

  // Note [Rounds]: this machine's step times drift by ±15% over seconds, so the four modes are timed
  // in turn, `rounds` times (a fresh Observer each round), and each mode's median over rounds is shown.
  auto plain = [](auto step) { step(); };
  TimeSteps(runner->get(), 20, plain);  // warm-up
  std::vector<double> none, idle, observed, recording, tiny_none, tiny_idle, tiny_observed, tiny_recording;
  constexpr int kTinyOps = 200000;
  size_t ops = 0;
  for (int round = 0; round < rounds; ++round) {
    none.push_back(TimeSteps(runner->get(), steps, plain));
    tiny_none.push_back(TinyOpSeconds(kTinyOps));
    auto observer = autouvm::runtime::Observer::Create();
    if (!observer.ok()) return 1;
    (*runner)->NameTensors(observer->get());
    idle.push_back(TimeSteps(runner->get(), steps, plain));
    tiny_idle.push_back(TinyOpSeconds(kTinyOps));
    (*observer)->BeginIteration(autouvm::runtime::IterationMode::kObserve);
    tiny_observed.push_back(TinyOpSeconds(kTinyOps));
    (*observer)->EndIteration();
    (*observer)->BeginIteration();
    tiny_recording.push_back(TinyOpSeconds(kTinyOps / 10));
    (*observer)->EndIteration();
    observed.push_back(TimeSteps(runner->get(), steps, [&](auto step) {
      (*observer)->BeginIteration(autouvm::runtime::IterationMode::kObserve);
      step();
      (*observer)->EndIteration();
    }));
    recording.push_back(TimeSteps(runner->get(), steps, [&](auto step) {
      (*observer)->BeginIteration();
      step();
      ops = (*observer)->EndIteration().ops.size();
    }));
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double base = median(none);
  std::printf(
      "model: dim %lld, %lld layers, %.1fM parameters; %d rounds of %d decode steps per mode; %zu ops per step\n\n",
      static_cast<long long>(c.dim), static_cast<long long>(c.n_layers), (*runner)->parameter_count() / 1e6, rounds,
      steps, ops);
  std::printf("| mode | ms / step | vs. no observer | µs / op |\n| --- | ---: | ---: | ---: |\n");
  auto row = [&](const char* mode, double t) {
    std::printf("| %s | %.3f | %.2fx | %.2f |\n", mode, t * 1e3, t / base,
                (t - base) * 1e6 / static_cast<double>(std::max<size_t>(ops, 1)));
  };
  row("no observer", base);
  row("observer installed (global callback), outside an iteration", median(idle));
  row("observed iteration (op boundaries, no inputs)", median(observed));
  row("recording", median(recording));
  const double tiny = median(tiny_none);
  std::printf("\nper-op cost on the cheapest op (one-element aten::add, %d per mode and round):\n\n", kTinyOps);
  std::printf("| mode | µs / op | added µs / op |\n| --- | ---: | ---: |\n");
  auto tiny_row = [&](const char* mode, double t) {
    std::printf("| %s | %.3f | %.3f |\n", mode, t * 1e6, (t - tiny) * 1e6);
  };
  tiny_row("no observer", tiny);
  tiny_row("observer installed (global callback), outside an iteration", median(tiny_idle));
  tiny_row("observed iteration (op boundaries, no inputs)", median(tiny_observed));
  tiny_row("recording (a trace of every op)", median(tiny_recording));
  return 0;
}
