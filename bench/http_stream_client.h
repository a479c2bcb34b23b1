// Generating through the daemon's OpenAI-compatible HTTP API (docs/openai-api.md) as a streaming client
// does, timed as bench/daemon_client.h's GenerateThroughDaemon times gRPC: POST /v1/completions with
// token ids and `stream: true`, each server-sent event timed as it arrives (cpp-httplib's client).
//
//   DaemonRun r = GenerateThroughHttp(http_port, "tiny-llama", BenchPrompt(16, vocab), 64);  // Die()s on an error
//
// Every token is counted: the request asks for `logprobs: 0`, so each token gets its own chunk (a token
// that ends inside a UTF-8 character would otherwise send none), and the count is checked against the
// final usage chunk. Thread-safe: each call opens its own connection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/daemon_client.h"

namespace autouvm::bench {

// Greedy, EOS ignored, `tokens` tokens after `prompt` (token ids, no bos added) from the daemon's HTTP API
// on 127.0.0.1:`port`. The run's `tokens` stay empty (the API streams texts, not ids); the rest is
// filled as GenerateThroughDaemon fills it, the first token timed from before the connection opens.
DaemonRun GenerateThroughHttp(int port, const std::string& model, const std::vector<int32_t>& prompt, int tokens);

struct HttpSampling {
  int n = 1;               // choices of the one prompt (they share its prefill)
  double temperature = 0;  // 0: greedy
  int64_t seed = -1;       // -1: none sent
};
// `sampling.n` choices of `tokens` tokens each after `prompt` in one request, EOS ignored: each choice's
// run, timed from before the connection opens.
std::vector<DaemonRun> GenerateChoicesThroughHttp(int port, const std::string& model,
                                                  const std::vector<int32_t>& prompt, int tokens,
                                                  const HttpSampling& sampling);

}  // namespace autouvm::bench
