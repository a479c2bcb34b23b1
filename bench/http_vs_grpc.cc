// http_vs_grpc: the same generation through the daemon's two streaming APIs, side by side against one
// daemon and one model: gRPC's Generation.GenerateStream (bench/daemon_client.h) and the OpenAI-compatible
// POST /v1/completions with `stream: true` (server-sent events, bench/http_stream_client.h). Does the HTTP
// front door cost first-token latency or decode rate against gRPC?
//
//   build/bench/http_vs_grpc --cpu --streams 4 --tokens 64 --repeats 3     # the CPU backend's tiny model
//   build-gpu/bench/http_vs_grpc --preset 7b --factor 2.0                   # GPU host: 7B under weights / 2
//
// One daemon serves both (gRPC on a free port, HTTP on another: --http-listen 127.0.0.1:0). With --cpu it
// runs on the CPU backend with the tiny model it generates on first start; with --preset (GPU host only,
// bench/preset_daemon.h) the preset's weights are generated on the GPU at load and its device budget is
// the weights' bytes / --factor. Both transports send the same requests: greedy, EOS ignored, --tokens
// tokens after a --prompt-token prompt given as token ids (the i-th stream's prompt differs in its first
// id). One request alone and --warmups bursts on each transport come first (their shapes are profiled),
// then --repeats rounds, each a burst of --streams concurrent requests (one client thread each, started
// together) through gRPC, then one through HTTP: gRPC, HTTP, gRPC, HTTP, ...
//
// Per transport, over all its timed requests: TTFT p50 and max (from the call to the first token's
// arrival; over HTTP the connection is opened inside that window, as a client without a pool does), each
// request's decode rate p50 ((tokens - 1) / first to last token), and the aggregate rate of its bursts
// (p50 over rounds; tokens after the first / the burst's first first token to its last token), then the
// HTTP / gRPC ratios. HTTP asks for `logprobs: 0` so that every token gets its own event (a token that
// ends inside a UTF-8 character sends none otherwise): its events are larger than gRPC's messages.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/daemon_client.h"
#include "bench/http_stream_client.h"
#include "bench/preset_daemon.h"

namespace {

using autouvm::bench::DaemonRun;
using autouvm::bench::Die;
using autouvm::bench::Median;
using Clock = std::chrono::steady_clock;
// One request on one transport: the i-th stream's prompt in, its timed run out.
using Transport = std::function<DaemonRun(const std::vector<int32_t>& prompt)>;

struct Burst {
  std::vector<DaemonRun> runs;
  double aggregate_tokens_per_s = 0;
};

// `streams` requests started together, one client thread each.
Burst RunBurst(const Transport& generate, const std::vector<int32_t>& prompt, int streams, int tokens) {
  Burst b;
  b.runs.resize(static_cast<size_t>(streams));
  std::barrier go(streams);
  std::vector<std::thread> clients;
  for (int i = 0; i < streams; ++i) {
    clients.emplace_back([&, i] {
      std::vector<int32_t> own = prompt;
      own[0] = 1 + i;  // the tiny model's vocabulary holds 320 ids
      go.arrive_and_wait();
      b.runs[static_cast<size_t>(i)] = generate(own);
    });
  }
  for (std::thread& t : clients) t.join();
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();
  for (const DaemonRun& r : b.runs) {
    first = std::min(first, r.first_token);
    last = std::max(last, r.last_token);
  }
  b.aggregate_tokens_per_s = streams * (tokens - 1) / std::chrono::duration<double>(last - first).count();
  return b;
}

struct Summary {
  double ttft_p50 = 0, ttft_max = 0, decode_p50 = 0, aggregate_p50 = 0;
  size_t requests = 0;
};

Summary Summarize(const std::vector<Burst>& bursts) {
  std::vector<double> ttft, decode, aggregate;
  for (const Burst& b : bursts) {
    aggregate.push_back(b.aggregate_tokens_per_s);
    for (const DaemonRun& r : b.runs) {
      ttft.push_back(r.ttft_ms);
      decode.push_back(r.decode_tokens_per_s);
    }
  }
  return Summary{.ttft_p50 = Median(ttft),
                 .ttft_max = ttft.empty() ? 0 : *std::max_element(ttft.begin(), ttft.end()),
                 .decode_p50 = Median(decode),
                 .aggregate_p50 = Median(aggregate),
                 .requests = ttft.size()};
}

double MaxTtft(const Burst& b) {
  double m = 0;
  for (const DaemonRun& r : b.runs) m = std::max(m, r.ttft_ms);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  autouvm::bench::BenchName() = "http_vs_grpc";
  CLI::App app{"http_vs_grpc: streaming generation through the daemon's HTTP (OpenAI) and gRPC APIs, side by side"};
  bool cpu = false;
  std::string preset;
  double factor = 2.0;
  int streams = 4, tokens = 64, prompt_len = 16, warmups = 1, repeats = 3;
  std::string daemon_path = AUTOUVMD_PATH;
  auto* cpu_flag = app.add_flag("--cpu", cpu, "the CPU backend and its generated tiny model");
  app.add_option("--preset", preset, "GPU host: 7b, mistral7b, 13b or small, generated on the GPU")->excludes(cpu_flag);
  app.add_option("--factor", factor, "with --preset: oversubscription, the weights' bytes / the device budget")
      ->check(CLI::PositiveNumber);
  app.add_option("--streams", streams, "concurrent requests per burst")->check(CLI::Range(1, 256));
  app.add_option("--tokens", tokens, "tokens generated per request")->check(CLI::Range(2, 4096));
  app.add_option("--prompt", prompt_len, "prompt tokens")->check(CLI::Range(1, 4096));
  app.add_option("--warmups", warmups, "untimed bursts per transport first")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed rounds (a burst through each transport)")->check(CLI::Range(1, 1000));
  app.add_option("--autouvmd", daemon_path, "the daemon binary");
  CLI11_PARSE(app, argc, argv);
  if (cpu == !preset.empty()) Die("give --cpu or --preset");

  const std::string dir = absl::StrCat(std::filesystem::temp_directory_path().string(), "/http-vs-grpc-", getpid());
  std::filesystem::create_directories(dir);
  autouvm::bench::ServedModel served;
  if (cpu) {
    served.model = "tiny-llama";
    served.config_path = autouvm::bench::WriteCpuDaemonConfig(
        dir, served.model,
        absl::StrCat("model_defaults: {max_batch: ", streams, ", max_queue: ", std::max(streams, 64), "}"));
    served.about = "tiny-llama (generated by the daemon) on the CPU backend";
  } else {
    served = autouvm::bench::WritePresetDaemonConfig(dir, preset, factor, streams, prompt_len + tokens + 8);
  }
  const std::string http_port_file = dir + "/http-port";
  autouvm::bench::DaemonUnderTest d = autouvm::bench::StartDaemon(
      daemon_path, served.config_path, dir, {"--http-listen", "127.0.0.1:0", "--http-port-file", http_port_file});
  const std::string http_port = autouvm::bench::ReadWholeFile(http_port_file);  // written before the gRPC port
  if (http_port.empty()) Die("the daemon wrote no HTTP port: " + autouvm::bench::ReadWholeFile(d.log));
  autouvm::bench::WaitModelReady(d, served.model);
  const int64_t vocab = autouvm::bench::ModelStatusOf(d.admin.get(), served.model).info().vocab_size();
  const std::vector<int32_t> prompt = autouvm::bench::BenchPrompt(prompt_len, vocab);

  const Transport grpc = [&](const std::vector<int32_t>& p) {
    return autouvm::bench::GenerateThroughDaemon(d.generation.get(), served.model, p, tokens);
  };
  const Transport http = [&, port = std::stoi(http_port)](const std::vector<int32_t>& p) {
    return autouvm::bench::GenerateThroughHttp(port, served.model, p, tokens);
  };
  grpc(prompt);  // profiles batch 1's shapes
  if (!autouvm::bench::WaitDecodeReady(d.admin.get(), served.model, absl::Seconds(120))) Die("no decode plan");
  http(prompt);
  for (int w = 0; w < warmups; ++w) {
    RunBurst(grpc, prompt, streams, tokens);
    RunBurst(http, prompt, streams, tokens);
  }
  std::vector<Burst> grpc_bursts, http_bursts;
  for (int r = 0; r < repeats; ++r) {
    grpc_bursts.push_back(RunBurst(grpc, prompt, streams, tokens));
    http_bursts.push_back(RunBurst(http, prompt, streams, tokens));
  }
  const int code = autouvm::bench::StopDaemon(&d);

  std::printf(
      "%s; bursts of %d concurrent requests, %d prompt tokens (ids), %d generated (greedy, EOS ignored); %d "
      "untimed and %d timed bursts per transport, alternating gRPC, HTTP; daemon exit %d\n\n",
      served.about.c_str(), streams, prompt_len, tokens, warmups, repeats, code);
  const Summary g = Summarize(grpc_bursts), h = Summarize(http_bursts);
  std::printf(
      "| transport | requests | TTFT p50 ms | TTFT max ms | decode tok/s per request, p50 | aggregate tok/s, p50 of "
      "bursts |\n|---|---|---|---|---|---|\n");
  for (const auto& [name, s] : {std::pair{"gRPC", g}, std::pair{"HTTP", h}}) {
    std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f |\n", name, s.requests, s.ttft_p50, s.ttft_max, s.decode_p50,
                s.aggregate_p50);
  }
  std::printf("| HTTP / gRPC | | %.3f | %.3f | %.3f | %.3f |\n\n", h.ttft_p50 / g.ttft_p50, h.ttft_max / g.ttft_max,
              h.decode_p50 / g.decode_p50, h.aggregate_p50 / g.aggregate_p50);
  std::printf("| round | gRPC TTFT max ms | HTTP TTFT max ms | gRPC aggregate tok/s | HTTP aggregate tok/s |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int r = 0; r < repeats; ++r) {
    const Burst &gb = grpc_bursts[static_cast<size_t>(r)], &hb = http_bursts[static_cast<size_t>(r)];
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", r + 1, MaxTtft(gb), MaxTtft(hb), gb.aggregate_tokens_per_s,
                hb.aggregate_tokens_per_s);
  }
  std::filesystem::remove_all(dir);
  return code == 0 ? 0 : 1;
}
