#include "bench/sized_entry.h"

#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include "bench/bench_util.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/compute_device.h"

namespace autouvm::bench {
namespace {

// Runs `size` in a forked child and hands back its two figures (through a pipe); Die()s if it failed.
template <typename F>
std::pair<int64_t, int64_t> SizeInChild(F size) {
  int fds[2];
  if (pipe(fds) != 0) Die("pipe");
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    close(fds[0]);
    const std::pair<int64_t, int64_t> figures = size();
    const ssize_t wrote = write(fds[1], &figures, sizeof(figures));
    _exit(wrote == static_cast<ssize_t>(sizeof(figures)) ? 0 : 1);
  }
  close(fds[1]);
  std::pair<int64_t, int64_t> figures{0, 0};
  const ssize_t got = read(fds[0], &figures, sizeof(figures));
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (got != static_cast<ssize_t>(sizeof(figures)) || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    Die("sizing the model in a child process failed");
  }
  return figures;
}

}  // namespace

EntrySize WriteSizedEntry(const engine::ModelConfig& config, const std::string& repo, int max_batch,
                          const runtime::GpuSpec& spec) {
  const auto [named, weights] = SizeInChild([&] {
    Check(engine::WriteLlamaModel(config, static_cast<uint64_t>(config.generated_weights_seed), repo),
          "writing the model entry");
    auto device = Check(runtime::OpenComputeDevice({.backend = "cuda", .spec = spec}), "CUDA");
    auto runner =
        Check(engine::ModelRunner::Create(repo + "/" + config.name, config, max_batch, device.get()), "sizing");
    int64_t n = 0;
    for (const auto& t : runner->NamedTensors()) n += t.bytes;
    return std::pair<int64_t, int64_t>{n, runner->parameter_bytes()};
  });
  return EntrySize{.named_bytes = named, .weight_bytes = weights};
}

}  // namespace autouvm::bench
