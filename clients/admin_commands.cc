// The `models` and `status` subcommands over autouvm.v1.Admin.
#include "clients/admin_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autouvm/v1/admin.grpc.pb.h"
#include "clients/admin_call.h"
#include "clients/json_output.h"
#include "clients/profile_format.h"
#include "clients/status_names.h"
#include "clients/text_output.h"

namespace autouvm::cli {
namespace {

using autouvm::v1::ModelStatus;

std::string StateName(autouvm::v1::ModelState state) {
  return EnumShortName(autouvm::v1::ModelState_Name(state), "MODEL_STATE_", static_cast<int>(state));
}

void PrintModels(const autouvm::v1::ListModelsResponse& response) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "STATE", "DTYPE", "PARAMS", "MAX_SEQ", "ACTIVE/QUEUED"}};
  for (const ModelStatus& model : response.models()) {
    const auto& info = model.info();
    rows.push_back({model.name(), StateName(model.state()), info.dtype().empty() ? "-" : info.dtype(),
                    HumanCount(info.parameters()), info.max_seq() > 0 ? absl::StrCat(info.max_seq()) : "-",
                    absl::StrCat(model.active_requests(), "/", model.queued_requests())});
  }
  PrintTable(rows);
}

void PrintStatus(const ModelStatus& status) {
  auto line = [](std::string_view key, const auto& value) { std::cout << key << ": " << value << "\n"; };
  line("name", status.name());
  line("state", StateName(status.state()));
  if (!status.error().empty()) line("error", status.error());
  line("backend", status.backend());
  if (status.has_info()) {
    const auto& info = status.info();
    line("architecture", info.architecture());
    line("dtype", info.dtype());
    line("parameters", info.parameters());
    line("parameter_bytes", info.parameter_bytes());
    line("vocab_size", info.vocab_size());
    line("dim", info.dim());
    line("n_layers", info.n_layers());
    line("n_heads", info.n_heads());
    line("n_kv_heads", info.n_kv_heads());
    line("ffn_dim", info.ffn_dim());
    line("max_seq", info.max_seq());
    line("tokenizer", info.tokenizer());
    line("bos_id", info.bos_id());
    line("eos_id", info.eos_id());
  }
  line("max_batch", status.max_batch());
  line("max_queue", status.max_queue());
  line("active_requests", status.active_requests());
  line("queued_requests", status.queued_requests());
  line("requests_total", status.requests_total());
  line("tokens_generated_total", status.tokens_generated_total());
  line("kv_cache_bytes", status.kv_cache_bytes());
  line("decode_steps_total", status.decode_steps_total());
  line("decode_rows_total", status.decode_rows_total());
  line("prefill_passes_total", status.prefill_passes_total());
  line("prefill_rows_total", status.prefill_rows_total());
  line("mixed_passes_total", status.mixed_passes_total());
  line("passes_own_plan", status.passes_own_plan());
  line("passes_nearest_plan", status.passes_nearest_plan());
  line("passes_no_plan", status.passes_no_plan());
  line("turn_wait_seconds", status.turn_wait_seconds());
  line("prefill_pass_seconds", status.prefill_pass_seconds());
  line("decode_pass_seconds", status.decode_pass_seconds());
  line("mixed_pass_seconds", status.mixed_pass_seconds());
  line("model_digest", status.model_digest());
  line("policy", status.policy());
  line("device_budget_bytes", status.device_budget_bytes());
  for (const auto& profile : status.profiles()) line("profile", ProfileOneLine(profile));
  if (status.has_step_graphs()) {
    // Decode and packed steps run as CUDA graphs: docs/configuration.md runtime.cuda_graphs.
    const auto& g = status.step_graphs();
    line("step_graphs.graphs", g.graphs());
    line("step_graphs.captures", g.captures());
    line("step_graphs.capture_failures", g.capture_failures());
    line("step_graphs.recaptures", g.recaptures());
    line("step_graphs.replays", g.replays());
    line("step_graphs.eager_steps", g.eager_steps());
    line("step_graphs.staged_captures", g.staged_captures());
    line("step_graphs.staged_replays", g.staged_replays());
    line("step_graphs.packed_captures", g.packed_captures());
    line("step_graphs.packed_replays", g.packed_replays());
    line("step_graphs.capture_seconds", g.capture_seconds());
    line("step_graphs.bytes", g.bytes());
    if (!g.last_error().empty()) line("step_graphs.last_error", g.last_error());
  }
  if (status.has_execution()) {
    // What the executor did: docs/profiling.md "Following plans".
    const auto& e = status.execution();
    line("execution.backend", e.backend());
    line("execution.following", e.following().empty() ? "-" : e.following());
    line("execution.followed_iterations", e.followed_iterations());
    line("execution.abandoned_iterations", e.abandoned_iterations());
    line("execution.plan_switches", e.plan_switches());
    line("execution.plan_switch_seconds", e.plan_switch_seconds());
    line("execution.prefetched_bytes", e.prefetched_bytes());
    line("execution.evicted_bytes", e.evicted_bytes());
    line("execution.resident_bytes", e.resident_bytes());
    line("execution.staged_bytes", e.staged_bytes());
    line("execution.host_copy_bytes", e.host_copy_bytes());
    line("execution.in_place_bytes", e.in_place_bytes());
    line("execution.displaced_bytes", e.displaced_bytes());
    line("execution.in_place_read_bytes", e.in_place_read_bytes());
    line("execution.peak_resident_bytes", e.peak_resident_bytes());
    line("execution.gpu_fault_groups", e.gpu_fault_groups());
    line("execution.h2d_bytes", e.h2d_bytes());
    line("execution.d2h_bytes", e.d2h_bytes());
    line("execution.monitor_samples", e.sampled_iterations());
    line("execution.reclassified_ops", e.reclassified_ops());
    line("execution.repinned_bytes", e.repinned_bytes());
    // models.<name>.idle_sleep: docs/configuration.md.
    line("execution.asleep", e.asleep() ? "yes" : "no");
    line("execution.sleeps", e.sleeps());
    line("execution.wakes", e.wakes());
    line("execution.last_wake_seconds", e.last_wake_seconds());
    if (!e.last_error().empty()) line("execution.last_error", e.last_error());
  }
  std::cout.flush();
}

}  // namespace

CLI::App* AddModelsCommand(CLI::App* app, ModelsFlags* flags) {
  CLI::App* cmd = app->add_subcommand("models", "List the served models and their state");
  cmd->add_flag("--json", flags->json, "Print the ListModelsResponse as one JSON line");
  return cmd;
}

CLI::App* AddStatusCommand(CLI::App* app, StatusFlags* flags) {
  CLI::App* cmd = app->add_subcommand("status", "Show one model's status");
  cmd->add_option("model", flags->model, "Model name")->required();
  cmd->add_flag("--json", flags->json, "Print the ModelStatus as one JSON line");
  return cmd;
}

namespace {

// load, unload, sleep and wake: one model named, and --json for the response.
CLI::App* AddModelControlCommand(CLI::App* app, ModelControlFlags* flags, const std::string& name,
                                 const std::string& description, const std::string& model_help,
                                 const std::string& response) {
  CLI::App* cmd = app->add_subcommand(name, description);
  cmd->add_option("model", flags->model, model_help)->required();
  cmd->add_flag("--json", flags->json, "Print the " + response + " as one JSON line");
  return cmd;
}

// Calls `method` for flags.model and prints its response: as JSON, or `model MODEL <text(response)>`.
template <typename Request, typename Response, typename Method, typename Text>
int RunModelControl(const ModelControlFlags& flags, const ConnectionFlags& connection, Method method, Text text) {
  Request request;
  request.set_model(flags.model);
  Response response;
  const int exit_code = CallAdmin(connection, method, request, &response);
  if (exit_code != kExitOk) return exit_code;
  if (flags.json) {
    PrintJsonLine(response);
  } else {
    std::cout << "model " << flags.model << " " << text(response) << "\n";
  }
  return kExitOk;
}

std::string Seconds(double s) { return absl::StrFormat("%.2f s", s); }

}  // namespace

CLI::App* AddLoadCommand(CLI::App* app, ModelControlFlags* flags) {
  return AddModelControlCommand(
      app, flags, "load",
      "Load a model from the repository (its entry read again); returns once it serves, or its error",
      "Model name (its directory in the repository)", "LoadModelResponse");
}

CLI::App* AddUnloadCommand(CLI::App* app, ModelControlFlags* flags) {
  return AddModelControlCommand(
      app, flags, "unload",
      "Stop serving a model once its requests finish (server.drain_timeout), freeing its device budget", "Model name",
      "UnloadModelResponse");
}

CLI::App* AddSleepCommand(CLI::App* app, ModelControlFlags* flags) {
  return AddModelControlCommand(
      app, flags, "sleep",
      "Put a model to sleep once it has nothing to run: its device memory back down to its sleep_floor", "Model name",
      "SleepModelResponse");
}

CLI::App* AddWakeCommand(CLI::App* app, ModelControlFlags* flags) {
  return AddModelControlCommand(app, flags, "wake", "Wake a sleeping model now: its plan's weights back on the device",
                                "Model name", "WakeModelResponse");
}

int RunLoad(const ModelControlFlags& flags, const ConnectionFlags& connection) {
  return RunModelControl<autouvm::v1::LoadModelRequest, autouvm::v1::LoadModelResponse>(
      flags, connection, &autouvm::v1::Admin::Stub::LoadModel, [](const autouvm::v1::LoadModelResponse& r) {
        return absl::StrCat("loaded in ", Seconds(r.load_seconds()), ", device budget ",
                            r.model().device_budget_bytes(), " bytes");
      });
}

int RunUnload(const ModelControlFlags& flags, const ConnectionFlags& connection) {
  return RunModelControl<autouvm::v1::UnloadModelRequest, autouvm::v1::UnloadModelResponse>(
      flags, connection, &autouvm::v1::Admin::Stub::UnloadModel, [](const autouvm::v1::UnloadModelResponse& r) {
        return absl::StrCat("unloaded in ", Seconds(r.unload_seconds()));
      });
}

int RunSleep(const ModelControlFlags& flags, const ConnectionFlags& connection) {
  return RunModelControl<autouvm::v1::SleepModelRequest, autouvm::v1::SleepModelResponse>(
      flags, connection, &autouvm::v1::Admin::Stub::SleepModel, [](const autouvm::v1::SleepModelResponse& r) {
        return absl::StrCat("asleep in ", Seconds(r.sleep_seconds()), ", ", r.model().execution().resident_bytes(),
                            " bytes on the device");
      });
}

int RunWake(const ModelControlFlags& flags, const ConnectionFlags& connection) {
  return RunModelControl<autouvm::v1::WakeModelRequest, autouvm::v1::WakeModelResponse>(
      flags, connection, &autouvm::v1::Admin::Stub::WakeModel, [](const autouvm::v1::WakeModelResponse& r) {
        return absl::StrCat("awake in ", Seconds(r.wake_seconds()), ", ", r.model().execution().resident_bytes(),
                            " bytes on the device");
      });
}

int RunModels(const ModelsFlags& flags, const ConnectionFlags& connection) {
  autouvm::v1::ListModelsResponse response;
  const int exit_code =
      CallAdmin(connection, &autouvm::v1::Admin::Stub::ListModels, autouvm::v1::ListModelsRequest(), &response);
  if (exit_code != kExitOk) return exit_code;
  flags.json ? PrintJsonLine(response) : PrintModels(response);
  return kExitOk;
}

int RunStatus(const StatusFlags& flags, const ConnectionFlags& connection) {
  autouvm::v1::GetModelStatusRequest request;
  request.set_model(flags.model);
  ModelStatus response;
  const int exit_code = CallAdmin(connection, &autouvm::v1::Admin::Stub::GetModelStatus, request, &response);
  if (exit_code != kExitOk) return exit_code;
  flags.json ? PrintJsonLine(response) : PrintStatus(response);
  return kExitOk;
}

}  // namespace autouvm::cli
