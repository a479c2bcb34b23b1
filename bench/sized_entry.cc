#include "bench/sized_entry.h"

#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "bench/bench_util.h"
#include "engine/llama_builder.h"
#include "engine/model_runner.h"
#include "runtime/compute_device.h"

namespace autouvm::bench {

std::pair<int64_t, int64_t> InChild(const std::function<std::pair<int64_t, int64_t>()>& work) {
  int fds[2];
  if (pipe(fds) != 0) Die("pipe");
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    close(fds[0]);
    const std::pair<int64_t, int64_t> figures = work();
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
    Die("the child process's work failed");
  }
  return figures;
}

EntrySize WriteSizedEntry(const engine::ModelConfig& config, const std::string& repo, int max_batch,
                          const runtime::GpuSpec& spec) {
  const auto [named, weights] = InChild([&] {
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

double MeasureHbmBytesPerS(const runtime::GpuSpec& spec) {
  const auto [bytes, ns] = InChild([&] {
    auto device = Check(runtime::OpenComputeDevice({.backend = "cuda", .spec = spec}), "CUDA");
    auto on = device->Enter();
    const int64_t n = int64_t{1} << 30;  // bf16: 2 GiB
    torch::Tensor a = torch::ones({n}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
    torch::Tensor b = torch::empty_like(a);
    b.copy_(a);
    (void)b[0].item<float>();  // waits for the copy: both now resident
    const int kCopies = 20;
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < kCopies; ++i) (i % 2 == 0 ? b : a).copy_(i % 2 == 0 ? a : b);
    (void)a[0].item<float>();
    const auto took = std::chrono::steady_clock::now() - began;
    return std::pair<int64_t, int64_t>{2 * kCopies * n * 2,
                                       std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()};
  });
  return static_cast<double>(bytes) / (static_cast<double>(ns) / 1e9);
}

double MeasureLinkBytesPerS(const runtime::GpuSpec& spec) {
  const auto [bytes, ns] = InChild([&] {
    auto device = Check(runtime::OpenComputeDevice({.backend = "cuda", .spec = spec}), "CUDA");
    auto on = device->Enter();
    const int64_t n = int64_t{1} << 29;  // bf16: 1 GiB
    torch::Tensor host = torch::ones({n}, torch::TensorOptions().dtype(torch::kBFloat16).pinned_memory(true));
    torch::Tensor gpu = torch::empty({n}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
    gpu.copy_(host);
    (void)gpu[0].item<float>();
    const int kCopies = 8;
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < kCopies; ++i) gpu.copy_(host, /*non_blocking=*/true);
    (void)gpu[0].item<float>();
    const auto took = std::chrono::steady_clock::now() - began;
    return std::pair<int64_t, int64_t>{kCopies * n * 2,
                                       std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()};
  });
  return static_cast<double>(bytes) / (static_cast<double>(ns) / 1e9);
}

}  // namespace autouvm::bench
