// `autouvm-cli bench`: a load generator. --concurrency clients each run streaming generations back to
// back for --duration seconds (or until --requests have started), cancelling --cancel-rate of them at a
// random token, and the command prints throughput, latency percentiles and how every stream ended.
//
// Every stream is classified: completed (a final message, then OK), cancelled (as asked: CANCELLED, or a
// final message that beat the cancel), failed (any other status: counted by code), or broken (OK without
// a final message, or messages after the final one — the server's contract broken). Exit 0 when nothing
// failed or broke, 1 otherwise (docs/cli.md "bench"). With --json the summary is one JSON object on stdout.
//
// Usage: AddBenchCommand(&app, &flags) before parsing; RunBench(flags, connection) if it was parsed.
// Thread-safety: RunBench owns its client threads; call it from main's thread.
#pragma once

#include <cstdint>
#include <string>

#include "clients/connection.h"

namespace CLI {
class App;
}  // namespace CLI

namespace autouvm::cli {

struct BenchFlags {
  std::string model;
  int concurrency = 8;
  double duration_s = 30;
  int64_t requests = 0;   // stop starting new ones after this many (0: only --duration stops)
  int prompt_words = 32;  // the prompt: this many words of text
  int max_tokens = 64;    // per request, past end-of-sequence unless --stop-at-eos
  bool stop_at_eos = false;
  double cancel_rate = 0;  // fraction of requests cancelled at a random token in [1, max_tokens)
  uint64_t seed = 1;
  bool json = false;
};

CLI::App* AddBenchCommand(CLI::App* app, BenchFlags* flags);

int RunBench(const BenchFlags& flags, const ConnectionFlags& connection);

}  // namespace autouvm::cli
