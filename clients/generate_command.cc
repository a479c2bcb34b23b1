// The `generate` subcommand: options, the streaming and unary calls, and their output.
#include "clients/generate_command.h"

#include <grpcpp/client_context.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"
#include "autouvm/v1/generation.grpc.pb.h"
#include "clients/interrupt_watcher.h"
#include "clients/json_output.h"
#include "clients/status_names.h"
#include "clients/text_output.h"

namespace autouvm::cli {
namespace {

using autouvm::v1::GenerateRequest;
using autouvm::v1::GenerateResponse;
using autouvm::v1::GenerateStreamResponse;

std::string FinishReasonName(autouvm::v1::FinishReason reason) {
  return EnumShortName(autouvm::v1::FinishReason_Name(reason), "FINISH_REASON_", static_cast<int>(reason));
}

// One line of key=value pairs, e.g.
// finish_reason=LENGTH prompt_tokens=5 completion_tokens=16 queue_ms=0.02 ttft_ms=3.10 per_token_ms=1.20
// total_ms=21.10 tokens_per_s=758.3 request_id=... model=tiny
// tokens_per_s: the completion's tokens over the whole request's time, as the server measured it.
void PrintSummary(const GenerateResponse& response) {
  const auto& timings = response.timings();
  const double per_s =
      timings.total_ms() > 0 ? 1000.0 * response.usage().completion_tokens() / timings.total_ms() : 0.0;
  std::cerr << absl::StrFormat(
                   "finish_reason=%s prompt_tokens=%u completion_tokens=%u queue_ms=%.2f ttft_ms=%.2f "
                   "per_token_ms=%.2f total_ms=%.2f tokens_per_s=%.1f request_id=%s model=%s",
                   FinishReasonName(response.finish_reason()), response.usage().prompt_tokens(),
                   response.usage().completion_tokens(), timings.queue_ms(), timings.time_to_first_token_ms(),
                   timings.per_token_ms(), timings.total_ms(), per_s, response.request_id(), response.model())
            << std::endl;
}

// Generated text for stdout: escaped where stdout is a terminal (EscapeForTerminal), as it is where it
// is a file or a pipe.
std::string ForStdout(const std::string& text) {
  static const bool terminal = isatty(STDOUT_FILENO) == 1;
  return terminal ? EscapeForTerminal(text) : text;
}

int RunStream(autouvm::v1::Generation::Stub& stub, const GenerateRequest& request, bool json,
              const ConnectionFlags& connection) {
  grpc::ClientContext context;
  ApplyDeadline(connection, &context);
  InterruptWatcher watcher(&context);
  auto reader = stub.GenerateStream(&context, request);

  GenerateStreamResponse message;
  std::optional<GenerateResponse> final_response;
  bool printed_text = false;
  while (reader->Read(&message)) {
    if (json) {
      PrintJsonLine(message);
    } else if (message.has_chunk() && !message.chunk().text().empty()) {
      std::cout << ForStdout(message.chunk().text()) << std::flush;
      printed_text = true;
    }
    if (message.has_final()) final_response = message.final();
  }
  const grpc::Status status = reader->Finish();
  const bool interrupted = watcher.Stop();

  // Text mode ends stdout with a newline after a whole answer, or after a partial one that was cut off.
  if (!json && (printed_text || (status.ok() && !interrupted))) std::cout << std::endl;
  if (interrupted) return ReportInterrupted();
  if (!status.ok()) return ReportRpcError(status);
  if (!final_response.has_value()) {
    return ReportRpcError(grpc::Status(grpc::StatusCode::INTERNAL, "stream ended without a final message"));
  }
  if (!json) PrintSummary(*final_response);
  return kExitOk;
}

int RunUnary(autouvm::v1::Generation::Stub& stub, const GenerateRequest& request, bool json,
             const ConnectionFlags& connection) {
  grpc::ClientContext context;
  ApplyDeadline(connection, &context);
  InterruptWatcher watcher(&context);
  GenerateResponse response;
  const grpc::Status status = stub.Generate(&context, request, &response);
  if (watcher.Stop()) return ReportInterrupted();
  if (!status.ok()) return ReportRpcError(status);
  if (json) {
    PrintJsonLine(response);
  } else {
    std::cout << ForStdout(response.text()) << std::endl;
    PrintSummary(response);
  }
  return kExitOk;
}

}  // namespace

CLI::App* AddGenerateCommand(CLI::App* app, GenerateFlags* flags) {
  CLI::App* cmd = app->add_subcommand("generate", "Generate text (streams by default)");
  cmd->add_option("--model", flags->model, "Model name, as listed by `models`")->required();

  CLI::Option_group* prompt = cmd->add_option_group("Prompt", "Exactly one of these");
  prompt->add_option("--prompt", flags->prompt, "Text prompt");
  prompt->add_option("--token-ids", flags->token_ids, "Prompt as token ids: 1,2,3")->delimiter(',');
  prompt->require_option(1);

  cmd->add_option("--max-tokens", flags->max_tokens, "Most tokens to generate (default: the model's)");
  cmd->add_option("--temperature", flags->temperature, "0 is greedy (server default 1.0)");
  cmd->add_option("--top-k", flags->top_k, "Keep the k most likely tokens (0: all)");
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling threshold in (0, 1]");
  cmd->add_option("--repetition-penalty", flags->repetition_penalty, "> 1 discourages repeats");
  cmd->add_option("--seed", flags->seed, "Sampling seed (default: random)");
  // allow_extra_args(false): each --stop takes exactly one value, so it can be repeated.
  cmd->add_option("--stop", flags->stop, "Stop string (repeatable)")->allow_extra_args(false);
  cmd->add_option("--stop-token-id", flags->stop_token_ids, "Stop token id (repeatable)")->allow_extra_args(false);
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past end-of-sequence");
  cmd->add_flag("--no-bos", flags->no_bos, "Do not prepend the beginning-of-sequence token");
  cmd->add_option("--request-id", flags->request_id, "Request id for logs (default: made by the server)");
  cmd->add_option("--logprobs", flags->logprobs,
                  "Each token's logprob and this many most likely alternatives, 0..20 (shown with --json)");
  cmd->add_flag("--unary", flags->unary, "Use the unary Generate call instead of GenerateStream");
  cmd->add_flag("--json", flags->json, "Print each response message as one JSON line");
  return cmd;
}

int RunGenerate(const GenerateFlags& flags, const ConnectionFlags& connection) {
  const GenerateRequest request = BuildGenerateRequest(flags);
  auto stub = autouvm::v1::Generation::NewStub(MakeChannel(connection));
  return flags.unary ? RunUnary(*stub, request, flags.json, connection)
                     : RunStream(*stub, request, flags.json, connection);
}

}  // namespace autouvm::cli
