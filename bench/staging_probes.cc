// The staging probes of bench/uvm_probes.h (GPU host only): a streamed weight kept as a pinned host
// copy and brought into its managed range by a copy engine, the executor's ring of such weights, and
// filling the host copy in the first place.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/bench_util.h"
#include "bench/event_timer.h"
#include "bench/uvm_probes.h"

namespace autouvm::bench {
namespace {

using runtime::Location;
using runtime::Stream;
using runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

void CopyIn8Threads(void* to, const void* from, int64_t bytes) {
  constexpr int kThreads = 8;
  const int64_t part = bytes / kThreads;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([=] {
      std::memcpy(static_cast<char*>(to) + k * part, static_cast<const char*>(from) + k * part,
                  static_cast<size_t>(k == kThreads - 1 ? bytes - k * part : part));
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

absl::Status ProbeStaged(runtime::DeviceBackend* backend) {
  const int64_t bytes = int64_t{1} << 30, elements = bytes / 2;
  ASSIGN_OR_RETURN(const uint64_t m, backend->AllocateManaged(bytes));
  void* host = nullptr;
  if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess) {
    return absl::ResourceExhaustedError("staged probe: 1 GiB of pinned host memory");
  }
  auto* h = static_cast<uint16_t*>(host);
  for (int64_t i = 0; i < elements; ++i) h[i] = 0x3F80;  // bf16 1.0
  auto t = torch::from_blob(reinterpret_cast<void*>(m), {elements},
                            torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  cudaStream_t side;
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  EventTimer timer;
  auto gpu_ms = [&](cudaStream_t on, auto&& f) {
    timer.Start(on);
    f();
    timer.Stop(on);
    return timer.Ms();
  };
  absl::Status failed;
  auto keep = [&](absl::Status st) {
    if (failed.ok()) failed = std::move(st);
  };
  const double expected = static_cast<double>(elements);
  cudaMemcpy(t.data_ptr(), host, bytes, cudaMemcpyDefault);  // resident on the device to begin with
  cudaDeviceSynchronize();
  for (int round = 0; round < 2; ++round) {
    for (const std::string way : {"discard, prefetch, copy", "discard, copy"}) {
      cudaDeviceSynchronize();
      ASSIGN_OR_RETURN(const UvmCounters c0, backend->ReadCounters());
      const float drop_ms = gpu_ms(s, [&] { keep(backend->Discard(m, bytes, Stream::kCompute)); });
      const auto t0 = Clock::now();
      float populate_ms = 0;
      backend->WaitEvent(Stream::kCopy, backend->RecordEvent(Stream::kCompute));  // the copy after the drop
      if (way == "discard, prefetch, copy") {
        populate_ms = gpu_ms(side, [&] { keep(backend->Prefetch(m, bytes, Location::kDevice, Stream::kCopy)); });
      }
      const float copy_ms = gpu_ms(side, [&] { cudaMemcpyAsync(t.data_ptr(), host, bytes, cudaMemcpyDefault, side); });
      const double host_ms = 1e3 * Seconds(t0, Clock::now());
      cudaDeviceSynchronize();
      float sum = 0;
      const float read_ms = gpu_ms(s, [&] { sum = t.sum(torch::kFloat).item<float>(); });
      const float again_ms = gpu_ms(s, [&] { (void)t.sum(torch::kFloat); });
      cudaDeviceSynchronize();
      RETURN_IF_ERROR(failed);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
        return absl::InternalError(absl::StrCat("staged probe: ", cudaGetErrorString(e)));
      }
      ASSIGN_OR_RETURN(const UvmCounters c1, backend->ReadCounters());
      const UvmCounters moved = c1 - c0;
      std::printf(
          "staged probe, 1 GiB, %s: drop %.2f ms, populate %.2f ms, copy %.2f ms (%.1f GB/s; the thread held %.2f "
          "ms), then reads %.2f, %.2f ms; contents %s; moved %.2f GiB host->device, %.2f GiB device->host, %lld "
          "fault groups\n",
          way.c_str(), drop_ms, populate_ms, copy_ms, bytes / (copy_ms * 1e6), host_ms, read_ms, again_ms,
          std::abs(sum - expected) <= 1e-6 * expected ? "right" : absl::StrCat("WRONG (sum ", sum, ")").c_str(),
          moved.h2d_total() / kGiB, moved.d2h_total() / kGiB, (long long)moved.gpu_fault_groups);
    }
  }
  cudaStreamDestroy(side);
  cudaFreeHost(host);
  return backend->FreeManaged(m);
}

absl::Status ProbeStagedRing(runtime::DeviceBackend* backend) {
  constexpr int kTensors = 24;
  const int64_t each = int64_t{128} << 20;
  std::vector<uint64_t> ranges;
  std::vector<torch::Tensor> views;
  for (int k = 0; k < kTensors; ++k) {
    ASSIGN_OR_RETURN(const uint64_t r, backend->AllocateManaged(each));
    ranges.push_back(r);
    views.push_back(torch::from_blob(reinterpret_cast<void*>(r), {each / 2},
                                     torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA)));
    views.back().fill_(1);
  }
  cudaDeviceSynchronize();
  for (uint64_t r : ranges) RETURN_IF_ERROR(backend->StageOut(r, each));
  auto small = torch::ones({4096}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  // Variants: {discard on the copy stream, in flight, discard at all}.
  struct Variant {
    bool discard_on_copy;
    int in_flight;
    bool discard;
  };
  for (const Variant v :
       {Variant{false, 2, true}, Variant{true, 2, true}, Variant{false, 4, true}, Variant{false, 2, false}}) {
    const bool discard_on_copy = v.discard_on_copy;
    const int extra_ops = 0;
    const int window = v.in_flight;
    {
      RETURN_IF_ERROR(backend->Synchronize());
      double stage_s = 0, discard_s = 0;
      std::vector<runtime::EventId> ready(kTensors, -1), used(kTensors, -1);
      auto timed = [](double* acc, auto&& f) {
        const auto t0 = Clock::now();
        absl::Status s = f();
        *acc += Seconds(t0, Clock::now());
        return s;
      };
      auto fetch = [&](int k) -> absl::Status {
        if (discard_on_copy && k >= window) {
          backend->WaitEvent(Stream::kCopy, used[k - window]);
          RETURN_IF_ERROR(timed(&discard_s, [&] { return backend->Discard(ranges[k - window], each, Stream::kCopy); }));
        } else {
          backend->WaitEvent(Stream::kCopy, backend->RecordEvent(Stream::kCompute));
        }
        RETURN_IF_ERROR(timed(&stage_s, [&] { return backend->StageIn(ranges[k], each, Stream::kCopy); }));
        ready[k] = backend->RecordEvent(Stream::kCopy);
        return absl::OkStatus();
      };
      const auto t0 = Clock::now();
      for (int k = 0; k < window; ++k) RETURN_IF_ERROR(fetch(k));
      double sum = 0;
      std::vector<torch::Tensor> sums;
      for (int k = 0; k < kTensors; ++k) {
        backend->WaitEvent(Stream::kCompute, ready[k]);
        sums.push_back(views[k].sum(torch::kFloat));
        for (int e = 0; e < extra_ops; ++e) small.add_(0);
        if (discard_on_copy) {
          used[k] = backend->RecordEvent(Stream::kCompute);
        } else if (v.discard) {
          RETURN_IF_ERROR(timed(&discard_s, [&] { return backend->Discard(ranges[k], each, Stream::kCompute); }));
        }
        if (k + window < kTensors) RETURN_IF_ERROR(fetch(k + window));
      }
      for (const auto& t : sums) sum += t.item<float>();
      RETURN_IF_ERROR(backend->Synchronize());
      const double wall = Seconds(t0, Clock::now());
      for (int k = 0; k < kTensors; ++k) {  // what is still on the device (all of them without discards)
        if (!v.discard || (discard_on_copy && k >= kTensors - window)) {
          RETURN_IF_ERROR(backend->Discard(ranges[k], each, Stream::kCopy));
        }
      }
      const double expected = static_cast<double>(kTensors) * static_cast<double>(each / 2);
      std::printf(
          "staged ring, %d x 128 MiB, %d in flight, discard %s, %d small ops per tensor: %.1f ms "
          "(%.1f GB/s); the calling thread spent %.1f ms in StageIn, %.1f ms in Discard; contents %s\n",
          kTensors, window,
          !v.discard        ? "none"
          : discard_on_copy ? "on the copy stream"
                            : "on the compute stream",
          extra_ops, 1e3 * wall, kTensors * static_cast<double>(each) / wall / 1e9, 1e3 * stage_s, 1e3 * discard_s,
          std::abs(sum - expected) <= 1e-6 * expected ? "right" : "WRONG");
    }
  }
  // Putting staged ranges back (Note [Host copies outlive staging]): half onto the device from their
  // host copies, half on the host; then staged again, reusing the kept copies.
  RETURN_IF_ERROR(backend->Synchronize());
  double back_s[2] = {0, 0};
  for (int k = 0; k < kTensors; ++k) {
    const bool device = k < kTensors / 2;
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(backend->Unstage(ranges[k], each, device ? Location::kDevice : Location::kHost));
    if (device) RETURN_IF_ERROR(backend->Synchronize());
    back_s[device ? 0 : 1] += Seconds(t0, Clock::now());
  }
  const auto t_again = Clock::now();
  for (uint64_t r : ranges) RETURN_IF_ERROR(backend->StageOut(r, each));
  const double again_s = Seconds(t_again, Clock::now());
  const double half = static_cast<double>(kTensors / 2) * static_cast<double>(each);
  std::printf(
      "staged ranges put back: onto the device %.1f GB/s, on the host %.1f GB/s; staged again from the kept "
      "copies %.1f GB/s\n",
      half / back_s[0] / 1e9, half / back_s[1] / 1e9, kTensors * static_cast<double>(each) / again_s / 1e9);
  for (uint64_t r : ranges) {
    RETURN_IF_ERROR(backend->Unstage(r, each, Location::kHost));
    RETURN_IF_ERROR(backend->ForgetHostCopies(r, each, runtime::DeviceBackend::WhenStaged::kRefuse));
    RETURN_IF_ERROR(backend->FreeManaged(r));
  }
  return absl::OkStatus();
}

// Filling a staged weight's pinned host copy from its managed range on the host (CudaBackend's
// CopyToHost): cudaMemcpy, a plain memcpy on the CPU, or a prefetch to the device and a copy back; and
// the way back, into the managed range on the host from the copy, three ways.
absl::Status ProbeHostCopyFill(runtime::DeviceBackend* backend) {
  const int64_t bytes = int64_t{1} << 30;
  ASSIGN_OR_RETURN(const uint64_t r, backend->AllocateManaged(bytes));
  std::memset(reinterpret_cast<void*>(r), 3, static_cast<size_t>(bytes));
  void* host = nullptr;
  if (cudaHostAlloc(&host, static_cast<size_t>(bytes), cudaHostAllocDefault) != cudaSuccess) {
    return absl::ResourceExhaustedError("host copy probe: cudaHostAlloc failed");
  }
  auto cuda = [](cudaError_t e, const char* call) {
    return e == cudaSuccess ? absl::OkStatus() : absl::InternalError(call);
  };
  auto on_host = [&]() -> absl::Status {
    RETURN_IF_ERROR(backend->Prefetch(r, bytes, Location::kHost, Stream::kCopy));
    return backend->Synchronize();
  };
  auto timed = [&](const char* how, auto&& fill) -> absl::Status {
    RETURN_IF_ERROR(on_host());
    std::memset(host, 0, static_cast<size_t>(bytes));
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(fill());
    const double s = Seconds(t0, Clock::now());
    const bool right = static_cast<const unsigned char*>(host)[bytes - 1] == 3;
    std::printf("host copy fill, 1 GiB on the host: %s %.1f GB/s, contents %s\n", how, bytes / s / 1e9,
                right ? "right" : "WRONG");
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(timed("cudaMemcpy", [&]() -> absl::Status {
    return cuda(cudaMemcpy(host, reinterpret_cast<void*>(r), bytes, cudaMemcpyDefault), "cudaMemcpy");
  }));
  RETURN_IF_ERROR(timed("memcpy on the CPU", [&]() -> absl::Status {
    std::memcpy(host, reinterpret_cast<const void*>(r), static_cast<size_t>(bytes));
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(timed("memcpy on the CPU, 8 threads", [&]() -> absl::Status {
    CopyIn8Threads(host, reinterpret_cast<const void*>(r), bytes);
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(timed("prefetch to the device, then cudaMemcpy", [&]() -> absl::Status {
    RETURN_IF_ERROR(backend->Prefetch(r, bytes, Location::kDevice, Stream::kCopy));
    RETURN_IF_ERROR(backend->Synchronize());
    return cuda(cudaMemcpy(host, reinterpret_cast<void*>(r), bytes, cudaMemcpyDefault), "cudaMemcpy");
  }));
  // The way back (CudaBackend::Unstage to the host, 1.9-2.3 GB/s with cudaMemcpy on 2026-11-30): the
  // managed range dropped and placed on the host with nothing to migrate, then filled from the copy.
  std::memset(host, 5, static_cast<size_t>(bytes));
  auto back = [&](const char* how, auto&& fill) -> absl::Status {
    RETURN_IF_ERROR(backend->Discard(r, bytes, Stream::kCopy));
    RETURN_IF_ERROR(backend->Prefetch(r, bytes, Location::kHost, Stream::kCopy));
    RETURN_IF_ERROR(backend->Synchronize());
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(fill());
    RETURN_IF_ERROR(backend->Synchronize());
    const double s = Seconds(t0, Clock::now());
    unsigned char last = 0;
    RETURN_IF_ERROR(
        cuda(cudaMemcpy(&last, reinterpret_cast<const void*>(r + bytes - 1), 1, cudaMemcpyDefault), "cudaMemcpy"));
    std::printf("host copy put back, 1 GiB: %s %.1f GB/s, contents %s\n", how, bytes / s / 1e9,
                last == 5 ? "right" : "WRONG");
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(back("cudaMemcpy (as Unstage does)", [&] {
    return cuda(cudaMemcpy(reinterpret_cast<void*>(r), host, bytes, cudaMemcpyDefault), "cudaMemcpy");
  }));
  RETURN_IF_ERROR(back("memcpy on the CPU", [&] {
    std::memcpy(reinterpret_cast<void*>(r), host, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(back("memcpy on the CPU, 8 threads", [&] {
    CopyIn8Threads(reinterpret_cast<void*>(r), host, bytes);
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(back("populated on the device, copied in, then prefetched to the host", [&]() -> absl::Status {
    RETURN_IF_ERROR(backend->Discard(r, bytes, Stream::kCopy));
    RETURN_IF_ERROR(backend->Prefetch(r, bytes, Location::kDevice, Stream::kCopy));  // populates
    RETURN_IF_ERROR(backend->Synchronize());
    RETURN_IF_ERROR(cuda(cudaMemcpy(reinterpret_cast<void*>(r), host, bytes, cudaMemcpyDefault), "cudaMemcpy"));
    return backend->Prefetch(r, bytes, Location::kHost, Stream::kCopy);
  }));
  cudaFreeHost(host);
  return backend->FreeManaged(r);
}

// The cost of a host copy's memory before anything is copied into it: a plan's first preparation
// allocates and pins as many bytes as it stages (10.9 GiB for the 13B at factor 1.75), and took 3-11 s
// where the fill alone (above) would take 1-2 s.
absl::Status ProbeHostCopyAlloc(runtime::DeviceBackend* backend) {
  const size_t bytes = size_t{1} << 30;
  {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string setting;
    std::getline(thp, setting);
    std::printf("host copy allocation: transparent huge pages %s\n", setting.empty() ? "(unknown)" : setting.c_str());
  }
  // How fast a pinned buffer is once made: a device buffer copied into it and back.
  void* dev = nullptr;
  if (cudaMalloc(&dev, bytes) != cudaSuccess) return absl::ResourceExhaustedError("host alloc probe: cudaMalloc");
  cudaMemset(dev, 7, bytes);
  auto copies = [&](void* host) {
    cudaDeviceSynchronize();
    const auto t0 = Clock::now();
    cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    const auto t1 = Clock::now();
    cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    const auto t2 = Clock::now();
    return std::pair<double, double>{bytes / Seconds(t0, t1) / 1e9, bytes / Seconds(t1, t2) / 1e9};
  };
  auto report = [&](const char* how, double alloc_s, double touch_s, double pin_s, void* host) {
    const auto [d2h, h2d] = copies(host);
    std::printf(
        "host copy allocation, 1 GiB: %s: allocate %.1f ms, touch %.1f ms, pin %.1f ms = %.2f GB/s; copies into it "
        "%.1f GB/s, out of it %.1f GB/s\n",
        how, 1e3 * alloc_s, 1e3 * touch_s, 1e3 * pin_s, bytes / (alloc_s + touch_s + pin_s) / 1e9, d2h, h2d);
  };
  {
    void* host = nullptr;
    const auto t0 = Clock::now();
    if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess) {
      return absl::ResourceExhaustedError("host alloc probe: cudaHostAlloc");
    }
    report("cudaHostAlloc (as CudaBackend does)", Seconds(t0, Clock::now()), 0, 0, host);
    const auto t1 = Clock::now();
    cudaFreeHost(host);
    std::printf("host copy allocation, 1 GiB: cudaFreeHost %.1f ms\n", 1e3 * Seconds(t1, Clock::now()));
  }
  // 4 KiB pages touched by one thread; huge pages touched by one thread, then by eight (the kernel
  // zeroes each page at its first touch, and in a VM the host backs it then too).
  struct Way {
    bool huge;
    int threads;
  };
  for (const Way way : {Way{false, 1}, Way{true, 1}, Way{true, 8}}) {
    const bool huge = way.huge;
    const auto t0 = Clock::now();
    void* host = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (host == MAP_FAILED) return absl::ResourceExhaustedError("host alloc probe: mmap");
    if (huge) madvise(host, bytes, MADV_HUGEPAGE);
    const auto t1 = Clock::now();
    if (way.threads == 1) {
      std::memset(host, 0, bytes);
    } else {
      std::vector<std::thread> threads;
      const size_t part = bytes / static_cast<size_t>(way.threads);
      for (int k = 0; k < way.threads; ++k) {
        threads.emplace_back([=] { std::memset(static_cast<char*>(host) + k * part, 0, part); });
      }
      for (std::thread& t : threads) t.join();
    }
    const auto t2 = Clock::now();
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) != cudaSuccess) {
      munmap(host, bytes);
      return absl::InternalError("host alloc probe: cudaHostRegister");
    }
    const auto t3 = Clock::now();
    report(!huge              ? "mmap, memset, cudaHostRegister"
           : way.threads == 1 ? "mmap, madvise(MADV_HUGEPAGE), memset, cudaHostRegister"
                              : "mmap, madvise(MADV_HUGEPAGE), memset by 8 threads, cudaHostRegister",
           Seconds(t0, t1), Seconds(t1, t2), Seconds(t2, t3), host);
    const auto t4 = Clock::now();
    cudaHostUnregister(host);
    munmap(host, bytes);
    std::printf("host copy allocation, 1 GiB: cudaHostUnregister and munmap%s %.1f ms\n", huge ? " (huge pages)" : "",
                1e3 * Seconds(t4, Clock::now()));
  }
  cudaFree(dev);
  (void)backend;
  return absl::OkStatus();
}

// A plan's first preparation in the backend's own calls: 8 GiB of weights on the host, as 64 ranges of
// 128 MiB, each given a host copy by StageOut (allocated, pinned, filled, the range discarded); how fast,
// and how much of the copies' memory the kernel gave as huge pages.
absl::Status ProbeHostCopyMany(runtime::DeviceBackend* backend) {
  constexpr int kRanges = 64;
  constexpr int64_t kBytes = int64_t{128} << 20;
  auto anon_huge_kib = [] {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t value = 0;
    std::string unit;
    while (meminfo >> key >> value >> unit) {
      if (key == "AnonHugePages:") return value;
    }
    return int64_t{-1};
  };
  std::vector<uint64_t> ranges;
  for (int k = 0; k < kRanges; ++k) {
    ASSIGN_OR_RETURN(const uint64_t r, backend->AllocateManaged(kBytes));
    std::memset(reinterpret_cast<void*>(r), k + 1, static_cast<size_t>(kBytes));
    RETURN_IF_ERROR(backend->Prefetch(r, kBytes, Location::kHost, Stream::kCopy));
    ranges.push_back(r);
  }
  RETURN_IF_ERROR(backend->Synchronize());
  const int64_t huge_before = anon_huge_kib();
  std::vector<double> each;
  const auto t0 = Clock::now();
  for (const uint64_t r : ranges) {
    const auto t = Clock::now();
    RETURN_IF_ERROR(backend->StageOut(r, kBytes));
    each.push_back(Seconds(t, Clock::now()));
  }
  const double total = Seconds(t0, Clock::now());
  const int64_t huge_after = anon_huge_kib();
  std::sort(each.begin(), each.end());
  std::printf(
      "host copies, %d ranges of 128 MiB on the host, StageOut each: %.2f s = %.1f GB/s (per range: fastest %.1f, "
      "median %.1f, slowest %.1f ms); huge pages %+.2f GiB\n",
      kRanges, total, kRanges * kBytes / total / 1e9, 1e3 * each.front(), 1e3 * each[each.size() / 2],
      1e3 * each.back(), (huge_after - huge_before) / 1048576.0);
  for (const uint64_t r : ranges) {
    RETURN_IF_ERROR(backend->ForgetHostCopies(r, kBytes, runtime::DeviceBackend::WhenStaged::kDrop));
    RETURN_IF_ERROR(backend->FreeManaged(r));
  }
  return absl::OkStatus();
}

}  // namespace autouvm::bench
