// batching_bench: what continuous batching buys. For N requests of T generated tokens each, it times
// the scheduler running them one after another versus all submitted at once (sharing decode steps),
// on a generated Llama model, in-process (no gRPC), and prints a table.
//
//   build/bench/batching_bench --dim 1024 --layers 8 --tokens 64 --streams 1,2,4,8,16
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "bench/bench_model.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"

namespace autouvm::bench {
namespace {

using engine::GenerationParams;
using engine::GenerationResult;

// Counts finished requests and the tokens they generated.
class Counter final : public engine::GenerationSink {
 public:
  void OnToken(const engine::GeneratedToken&) override {}
  void OnFinish(const std::string&, const GenerationResult& result) override {
    absl::MutexLock lock(&mu_);
    ++done_;
    tokens_ += result.completion_tokens;
    ok_ = ok_ && result.status.ok();
  }
  // Blocks until `n` requests have finished.
  void WaitFor(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return done_ >= n; };
    mu_.Await(absl::Condition(&reached));
  }
  int64_t tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  bool ok() {
    absl::MutexLock lock(&mu_);
    return ok_;
  }

 private:
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool ok_ ABSL_GUARDED_BY(mu_) = true;
};

GenerationParams Request(int i, int tokens) {
  GenerationParams p;
  p.request_id = "bench-" + std::to_string(i);
  p.prompt = {256};
  for (char c : "benchmark prompt " + std::to_string(i)) p.prompt.push_back(static_cast<unsigned char>(c));
  p.max_tokens = tokens;
  p.sampling.temperature = 0;
  return p;
}

// Seconds to finish `n` requests, submitted one after another (each waits for the last) or all at once.
double Run(engine::Scheduler& sched, int n, int tokens, bool together, int64_t* generated) {
  Counter counter;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (!sched.Submit(Request(i, tokens), &counter).ok()) std::abort();
    if (!together) counter.WaitFor(i + 1);
  }
  counter.WaitFor(n);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!counter.ok()) std::abort();
  *generated = counter.tokens();
  return s;
}

}  // namespace
}  // namespace autouvm::bench

int main(int argc, char** argv) {
  using namespace autouvm;
  engine::ModelConfig c = engine::DefaultTinyModelConfig("bench-llama");
  int tokens = 64;
  std::string streams_csv = "1,2,4,8,16";
  int threads = 0;
  CLI::App app{"Sequential vs continuously batched generation on a generated Llama model"};
  bench::AddModelFlags(app, &c);
  app.add_option("--max-seq", c.max_seq)->capture_default_str();
  app.add_option("--tokens", tokens, "tokens generated per request")->capture_default_str();
  app.add_option("--streams", streams_csv, "request counts to try")->capture_default_str();
  app.add_option("--threads", threads, "libtorch intra-op threads (0: default)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  bench::FinishModelFlags(&c);
  std::vector<int> streams;
  for (auto part : absl::StrSplit(streams_csv, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      std::fprintf(stderr, "--streams: '%s' is not a positive integer\n", std::string(part).c_str());
      return 2;
    }
    streams.push_back(n);
  }
  const int max_batch = *std::max_element(streams.begin(), streams.end());
  if (threads > 0) engine::SetIntraOpThreads(threads);

  auto runner = bench::MakeBenchRunner(c, max_batch);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n", std::string(runner.status().message()).c_str());
    return 1;
  }
  tokenizer::ByteTokenizer tokenizer(c.vocab_size, c.bos_id, c.eos_id);
  base::RealClock clock;
  engine::Scheduler sched(runner->get(), &tokenizer, {.max_batch = max_batch, .max_queue = max_batch}, &clock);

  std::printf("model: dim %lld, %lld layers, %lld heads (%lld kv), ffn %lld, %s, %.1fM parameters; %d tokens/request\n",
              (long long)c.dim, (long long)c.n_layers, (long long)c.n_heads, (long long)c.n_kv_heads,
              (long long)c.ffn_dim, c.dtype.c_str(), (*runner)->parameter_count() / 1e6, tokens);
  int64_t warm = 0;
  bench::Run(sched, 1, 8, false, &warm);
  std::printf("\n| requests | one after another (s) | batched (s) | speed-up | batched tokens/s |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: |\n");
  for (int n : streams) {
    int64_t gen_seq = 0, gen_bat = 0;
    const double seq = bench::Run(sched, n, tokens, false, &gen_seq);
    const double bat = bench::Run(sched, n, tokens, true, &gen_bat);
    std::printf("| %d | %.3f | %.3f | %.2fx | %.0f |\n", n, seq, bat, seq / bat, gen_bat / bat);
  }
  sched.Shutdown(absl::ZeroDuration());
  return 0;
}
