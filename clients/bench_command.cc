// The `bench` subcommand: concurrent streaming clients, their outcomes and latencies.
#include "clients/bench_command.h"

#include <grpcpp/client_context.h>
#include <signal.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autouvm/v1/generation.grpc.pb.h"
#include "clients/status_names.h"

namespace autouvm::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// How one stream ended (see bench_command.h).
enum class Outcome { kCompleted, kCancelled, kFailed, kBroken };

struct Totals {
  std::mutex mu;
  int64_t started = 0, completed = 0, cancelled = 0, failed = 0, broken = 0, tokens = 0;
  std::map<std::string, int64_t> failures;  // "CODE: message" (first 120 characters) -> count
  std::vector<std::string> broken_examples;
  std::vector<double> ttft_ms, inter_token_ms, request_ms;  // completed streams only
};

// The in-flight calls, so that Ctrl-C can cancel them all.
struct Calls {
  std::mutex mu;
  std::set<grpc::ClientContext*> live;
  bool interrupted = false;
};

std::string Words(int n) {
  static const char* kWords[] = {"the",  "model", "reads",   "every", "weight", "once", "per",
                                 "step", "and",   "streams", "what",  "does",   "not",  "fit"};
  std::string s;
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, i ? " " : "", kWords[i % 14]);
  return s;
}

// A JSON string's contents: quotes and backslashes escaped, control characters as spaces.
std::string JsonEscaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) >= 0x20 ? c : ' ';
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[k];
}

void RunClient(int index, const BenchFlags& flags, autouvm::v1::Generation::Stub* stub, const ConnectionFlags& conn,
               Clock::time_point until, std::atomic<int64_t>* next_request, Totals* totals, Calls* calls) {
  std::mt19937_64 rng(flags.seed * 1000003 + static_cast<uint64_t>(index));
  std::uniform_real_distribution<double> unit(0, 1);
  autouvm::v1::GenerateRequest request;
  request.set_model(flags.model);
  request.set_text(Words(flags.prompt_words));
  request.set_max_tokens(static_cast<uint32_t>(flags.max_tokens));
  request.set_ignore_eos(!flags.stop_at_eos);
  request.mutable_sampling()->set_temperature(0);
  while (Clock::now() < until) {
    const int64_t n = next_request->fetch_add(1);
    if (flags.requests > 0 && n >= flags.requests) return;
    int cancel_after = -1;  // cancel once this many tokens have arrived
    if (flags.max_tokens > 1 && unit(rng) < flags.cancel_rate) {
      cancel_after = 1 + static_cast<int>(rng() % static_cast<uint64_t>(flags.max_tokens - 1));
    }
    request.set_request_id(absl::StrCat("bench-", n));
    grpc::ClientContext context;
    ApplyDeadline(conn, &context);
    {
      std::lock_guard<std::mutex> lock(calls->mu);
      if (calls->interrupted) return;
      calls->live.insert(&context);
    }
    const auto t0 = Clock::now();
    auto reader = stub->GenerateStream(&context, request);
    autouvm::v1::GenerateStreamResponse message;
    int tokens = 0, finals = 0, after_final = 0;
    bool cancelled = false;
    double ttft = -1;
    std::vector<double> gaps;
    auto last = t0;
    while (reader->Read(&message)) {
      const auto now = Clock::now();
      if (finals > 0) ++after_final;
      if (message.has_final()) ++finals;
      if (message.has_chunk()) {
        tokens += message.chunk().token_ids_size();
        if (ttft < 0) {
          ttft = Ms(now - t0);
        } else {
          gaps.push_back(Ms(now - last));
        }
        last = now;
        if (!cancelled && cancel_after > 0 && tokens >= cancel_after) {
          context.TryCancel();
          cancelled = true;
        }
      }
    }
    const grpc::Status status = reader->Finish();
    const double total_ms = Ms(Clock::now() - t0);
    {
      std::lock_guard<std::mutex> lock(calls->mu);
      calls->live.erase(&context);
      cancelled = cancelled || calls->interrupted;
    }
    Outcome outcome;
    std::string why;
    if (after_final > 0 || finals > 1) {
      outcome = Outcome::kBroken;
      why = absl::StrCat("request ", n, ": ", after_final, " messages after the final one");
    } else if (status.ok() && finals == 1) {
      outcome = Outcome::kCompleted;
    } else if (status.ok()) {
      outcome = Outcome::kBroken;
      why = absl::StrCat("request ", n, ": OK without a final message after ", tokens, " tokens");
    } else if (cancelled && status.error_code() == grpc::StatusCode::CANCELLED) {
      outcome = Outcome::kCancelled;
    } else {
      outcome = Outcome::kFailed;
      why = absl::StrCat(StatusCodeName(status.error_code()), ": ", status.error_message().substr(0, 120),
                         tokens > 0 ? " (mid-stream)" : " (before the first token)");
    }
    if (cancelled && outcome == Outcome::kCompleted) outcome = Outcome::kCancelled;  // the final won the race
    if (outcome == Outcome::kFailed) {
      // Not a tight loop against a daemon that refuses (or is gone): a short pause before the next one.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::lock_guard<std::mutex> lock(totals->mu);
    ++totals->started;
    totals->tokens += tokens;
    switch (outcome) {
      case Outcome::kCompleted:
        ++totals->completed;
        if (ttft >= 0) totals->ttft_ms.push_back(ttft);
        totals->inter_token_ms.insert(totals->inter_token_ms.end(), gaps.begin(), gaps.end());
        totals->request_ms.push_back(total_ms);
        break;
      case Outcome::kCancelled:
        ++totals->cancelled;
        break;
      case Outcome::kFailed:
        ++totals->failed;
        ++totals->failures[why];
        break;
      case Outcome::kBroken:
        ++totals->broken;
        if (totals->broken_examples.size() < 5) totals->broken_examples.push_back(why);
        break;
    }
  }
}

// Ctrl-C: stop starting requests and cancel those in flight (SIGINT is blocked in every thread:
// interrupt_watcher.h).
void WatchInterrupts(Calls* calls, const std::atomic<bool>* done) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  const timespec tick{0, 100 * 1000 * 1000};
  while (!done->load()) {
    if (sigtimedwait(&set, nullptr, &tick) == SIGINT) {
      std::lock_guard<std::mutex> lock(calls->mu);
      calls->interrupted = true;
      for (grpc::ClientContext* c : calls->live) c->TryCancel();
      return;
    }
  }
}

}  // namespace

CLI::App* AddBenchCommand(CLI::App* app, BenchFlags* flags) {
  CLI::App* cmd = app->add_subcommand("bench", "Load the daemon with concurrent streaming generations");
  cmd->add_option("--model", flags->model, "Model name, as listed by `models`")->required();
  cmd->add_option("--concurrency", flags->concurrency, "Streams in flight at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--duration", flags->duration_s, "Seconds to keep starting requests")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--requests", flags->requests, "Stop after starting this many (0: --duration alone)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--prompt-words", flags->prompt_words, "Prompt length in words")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--max-tokens", flags->max_tokens, "Tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--stop-at-eos", flags->stop_at_eos, "End a request at end-of-sequence (default: ignore it)");
  cmd->add_option("--cancel-rate", flags->cancel_rate, "Fraction of requests cancelled at a random token")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed for which requests are cancelled, and when")->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print the summary as one JSON object");
  return cmd;
}

int RunBench(const BenchFlags& flags, const ConnectionFlags& connection) {
  auto channel = MakeChannel(connection);
  auto stub = autouvm::v1::Generation::NewStub(channel);
  Totals totals;
  Calls calls;
  std::atomic<int64_t> next_request{0};
  std::atomic<bool> done{false};
  std::thread interrupts(WatchInterrupts, &calls, &done);
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flags.duration_s));
  std::vector<std::thread> clients;
  for (int i = 0; i < flags.concurrency; ++i) {
    clients.emplace_back(RunClient, i, std::cref(flags), stub.get(), std::cref(connection), until, &next_request,
                         &totals, &calls);
  }
  for (std::thread& c : clients) c.join();
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  done = true;
  interrupts.join();

  const int64_t unexpected = totals.failed + totals.broken;
  struct Row {
    const char* name;
    const std::vector<double>* ms;
  };
  const Row rows[] = {
      {"ttft", &totals.ttft_ms}, {"inter_token", &totals.inter_token_ms}, {"request", &totals.request_ms}};
  if (flags.json) {
    std::string s = absl::StrFormat(
        "{\"model\": \"%s\", \"concurrency\": %d, \"seconds\": %.3f, \"started\": %d, \"completed\": %d, "
        "\"cancelled\": %d, \"failed\": %d, \"broken\": %d, \"tokens\": %d, \"requests_per_s\": %.3f, "
        "\"tokens_per_s\": %.3f, \"interrupted\": %s",
        JsonEscaped(flags.model), flags.concurrency, elapsed_s, totals.started, totals.completed, totals.cancelled,
        totals.failed, totals.broken, totals.tokens, totals.completed / elapsed_s, totals.tokens / elapsed_s,
        calls.interrupted ? "true" : "false");
    for (const Row& r : rows) {
      absl::StrAppendFormat(&s, ", \"%s_ms\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"max\": %.3f}", r.name,
                            Percentile(*r.ms, 0.5), Percentile(*r.ms, 0.9), Percentile(*r.ms, 0.99),
                            Percentile(*r.ms, 1.0));
    }
    s += ", \"failures\": {";
    bool first = true;
    for (const auto& [why, count] : totals.failures) {
      absl::StrAppendFormat(&s, "%s\"%s\": %d", first ? "" : ", ", JsonEscaped(why), count);
      first = false;
    }
    s += "}}";
    std::cout << s << std::endl;
  } else {
    std::cout << absl::StrFormat(
                     "%d streams started in %.1f s by %d clients: %d completed, %d cancelled (as asked), %d failed, "
                     "%d broken\n",
                     totals.started, elapsed_s, flags.concurrency, totals.completed, totals.cancelled, totals.failed,
                     totals.broken)
              << absl::StrFormat("throughput: %.2f requests/s completed, %.1f tokens/s streamed\n",
                                 totals.completed / elapsed_s, totals.tokens / elapsed_s)
              << absl::StrFormat("%-14s %10s %10s %10s %10s\n", "latency ms", "p50", "p90", "p99", "max");
    for (const Row& r : rows) {
      std::cout << absl::StrFormat("%-14s %10.2f %10.2f %10.2f %10.2f\n", r.name, Percentile(*r.ms, 0.5),
                                   Percentile(*r.ms, 0.9), Percentile(*r.ms, 0.99), Percentile(*r.ms, 1.0));
    }
    for (const auto& [why, count] : totals.failures) std::cout << "failed " << count << "x: " << why << "\n";
    std::cout << std::flush;
  }
  for (const std::string& why : totals.broken_examples) std::cerr << "broken stream: " << why << "\n";
  if (calls.interrupted) return kExitInterrupted;
  return unexpected == 0 ? kExitOk : kExitFailure;
}

}  // namespace autouvm::cli
