// observer_bench: what the Observer costs. Times decode steps of a generated Llama model with no
// observer, with an Observer installed (its global callback runs for every op) outside any iteration,
// in observed iterations (op boundaries only) and while recording, and prints a table (per step and
// per counted op).
//
//   build/bench/observer_bench --dim 256 --layers 4 --steps 200
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench_model.h"
#include "runtime/observer.h"
#include "server/llama_builder.h"
#include "server/model_runner.h"

namespace {

using autouvm::server::ModelRunner;

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

}  // namespace

int main(int argc, char** argv) {
  auto c = autouvm::server::DefaultTinyModelConfig("observer-bench");
  int steps = 200;
  CLI::App app{"Decode-step time with and without access-trace recording"};
  autouvm::bench::AddModelFlags(app, &c);
  app.add_option("--steps", steps)->capture_default_str();
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

  auto plain = [](auto step) { step(); };
  TimeSteps(runner->get(), 20, plain);  // warm-up
  const double no_observer = TimeSteps(runner->get(), steps, plain);
  auto observer = autouvm::runtime::Observer::Create();
  if (!observer.ok()) return 1;
  (*runner)->NameTensors(observer->get());
  const double idle = TimeSteps(runner->get(), steps, plain);
  const double observed = TimeSteps(runner->get(), steps, [&](auto step) {
    (*observer)->BeginIteration(autouvm::runtime::IterationMode::kObserve);
    step();
    (*observer)->EndIteration();
  });
  size_t ops = 0;
  const double recording = TimeSteps(runner->get(), steps, [&](auto step) {
    (*observer)->BeginIteration();
    step();
    ops = (*observer)->EndIteration().ops.size();
  });

  std::printf(
      "model: dim %lld, %lld layers, %.1fM parameters; median of %d decode steps; %zu ops recorded per step\n\n",
      static_cast<long long>(c.dim), static_cast<long long>(c.n_layers), (*runner)->parameter_count() / 1e6, steps,
      ops);
  std::printf("| mode | ms / step | vs. no observer | µs / op |\n| --- | ---: | ---: | ---: |\n");
  std::printf("| no observer | %.3f | 1.00x | |\n", no_observer * 1e3);
  std::printf("| observer installed, outside an iteration | %.3f | %.2fx | %.2f |\n", idle * 1e3, idle / no_observer,
              (idle - no_observer) * 1e6 / std::max<size_t>(ops, 1));
  std::printf("| observed iteration (op boundaries, no inputs) | %.3f | %.2fx | %.2f |\n", observed * 1e3,
              observed / no_observer, (observed - no_observer) * 1e6 / std::max<size_t>(ops, 1));
  std::printf("| recording | %.3f | %.2fx | %.2f |\n", recording * 1e3, recording / no_observer,
              (recording - no_observer) * 1e6 / std::max<size_t>(ops, 1));
  return 0;
}
