#include "bench/uvm_probes.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/bench_util.h"
#include "bench/event_timer.h"

namespace autouvm::bench {
namespace {

using runtime::Location;
using runtime::Stream;
using runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

int64_t DeviceUsed() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return static_cast<int64_t>(total - free);
}

}  // namespace

// What the driver does with the calls the executor makes, measured before the runs: how long a
// prefetch call holds the calling thread, and whether a read-mostly range prefetched to the host keeps
// its device copy (device memory in use, cudaMemGetInfo).
absl::Status ProbeDriver(runtime::DeviceBackend* backend) {
  using runtime::Advice;
  const int64_t bytes = int64_t{1} << 30;
  ASSIGN_OR_RETURN(const uint64_t a, backend->AllocateManaged(bytes));
  ASSIGN_OR_RETURN(const UvmCounters start, backend->ReadCounters());
  cudaMemset(reinterpret_cast<void*>(a), 1, static_cast<size_t>(bytes));
  cudaDeviceSynchronize();
  RETURN_IF_ERROR(backend->Prefetch(a, bytes, Location::kHost, Stream::kCopy));
  RETURN_IF_ERROR(backend->Synchronize());
  const int64_t base = DeviceUsed();
  RETURN_IF_ERROR(backend->Advise(a, bytes, Advice::kReadMostly, true));
  auto t0 = Clock::now();
  RETURN_IF_ERROR(backend->Prefetch(a, bytes, Location::kDevice, Stream::kCopy));
  const double call_s = Seconds(t0, Clock::now());
  RETURN_IF_ERROR(backend->Synchronize());
  const double done_s = Seconds(t0, Clock::now());
  const int64_t in = DeviceUsed() - base;
  t0 = Clock::now();
  RETURN_IF_ERROR(backend->Prefetch(a, bytes, Location::kHost, Stream::kCopy));
  RETURN_IF_ERROR(backend->Synchronize());
  const double back_s = Seconds(t0, Clock::now());
  const int64_t after_host_prefetch = DeviceUsed() - base;
  t0 = Clock::now();
  RETURN_IF_ERROR(backend->Advise(a, bytes, Advice::kPreferredLocation, true, Location::kHost));
  const double preferred_s = Seconds(t0, Clock::now());
  RETURN_IF_ERROR(backend->Advise(a, bytes, Advice::kReadMostly, false));
  const double unset_s = Seconds(t0, Clock::now());
  const int64_t after_unset = DeviceUsed() - base;
  // Is the device copy gone? A GPU write faults it back in if so (CUPTI counts the bytes).
  ASSIGN_OR_RETURN(const UvmCounters before_touch, backend->ReadCounters());
  cudaMemsetAsync(reinterpret_cast<void*>(a), 2, static_cast<size_t>(bytes), nullptr);
  cudaDeviceSynchronize();
  ASSIGN_OR_RETURN(const UvmCounters touched_total, backend->ReadCounters());
  const UvmCounters touched = touched_total - before_touch;
  (void)start;
  std::printf(
      "driver probe, 1 GiB read-mostly: prefetch to the device holds the calling thread %.2f ms of %.2f ms; "
      "device memory in use +%.2f GiB. Prefetch back to the host: %.2f ms, +%.2f GiB still in use. "
      "Preferred location host (%.2f ms) + unset read-mostly: %.2f ms, +%.2f GiB in use; a GPU write after it "
      "moved %.2f GiB host->device (%lld fault groups).\n",
      1e3 * call_s, 1e3 * done_s, in / kGiB, 1e3 * back_s, after_host_prefetch / kGiB, 1e3 * preferred_s, 1e3 * unset_s,
      after_unset / kGiB, touched.h2d_total() / kGiB, (long long)touched.gpu_fault_groups);
  RETURN_IF_ERROR(backend->Advise(a, bytes, Advice::kPreferredLocation, false));
  RETURN_IF_ERROR(backend->FreeManaged(a));
  return absl::OkStatus();
}

// Note [Prefetches hold the host] (runtime/sim/sim_backend.cc) asks when a prefetch call holds the
// calling thread: 1 GiB moved each way by one prefetch, issued to a stream with nothing pending, or
// queued behind work (matrix products on the compute stream; for the copy stream, a wait for them).
absl::Status ProbeQueuedPrefetch(runtime::DeviceBackend* backend) {
  const int64_t bytes = int64_t{1} << 30;
  ASSIGN_OR_RETURN(const uint64_t a, backend->AllocateManaged(bytes));
  cudaMemset(reinterpret_cast<void*>(a), 1, static_cast<size_t>(bytes));
  RETURN_IF_ERROR(backend->Synchronize());
  const at::Tensor x = at::randn({8192, 8192}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  auto busy = [&] {  // ~50 ms of matrix products on the compute stream (torch's current stream)
    for (int i = 0; i < 40; ++i) (void)x.matmul(x);
  };
  auto trip = [&](Location to, Stream stream, bool queued) -> absl::StatusOr<std::pair<double, double>> {
    RETURN_IF_ERROR(backend->Synchronize());
    if (queued) {
      busy();
      if (stream == Stream::kCopy) backend->WaitEvent(Stream::kCopy, backend->RecordEvent(Stream::kCompute));
    }
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(backend->Prefetch(a, bytes, to, stream));
    const double call_s = Seconds(t0, Clock::now());
    RETURN_IF_ERROR(backend->Synchronize());
    return std::make_pair(call_s, Seconds(t0, Clock::now()));
  };
  std::string out = "queued-prefetch probe, 1 GiB, ms the call held the thread / ms until done:";
  for (const bool queued : {false, true}) {
    for (int rep = 0; rep < 3; ++rep) {
      ASSIGN_OR_RETURN(const auto in, trip(Location::kDevice, Stream::kCopy, queued));
      ASSIGN_OR_RETURN(const auto back, trip(Location::kHost, Stream::kCompute, queued));
      absl::StrAppendFormat(&out, " %s: to device %.2f / %.2f, to host %.2f / %.2f;", queued ? "queued" : "idle",
                            1e3 * in.first, 1e3 * in.second, 1e3 * back.first, 1e3 * back.second);
    }
  }
  std::printf("%s\n", out.c_str());
  return backend->FreeManaged(a);
}

// The link as this process meets it, before the runs: pinned host->device copies (cudaMemcpyAsync of
// one 1 GiB buffer; 1 GiB as five 205 MiB buffers copied in turn, as explicit offloading does), and
// managed memory moved by a prefetch and read in place by the GPU (a reduction over a remote-mapped
// 1 GiB tensor). Best of three each.
absl::Status ProbeLink(runtime::DeviceBackend* backend) {
  using runtime::Advice;
  const int64_t bytes = int64_t{1} << 30, piece = bytes / 5;
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();  // the one torch computes on
  void *host = nullptr, *dev = nullptr;
  std::vector<void*> pieces(5, nullptr);
  if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess) {
    return absl::ResourceExhaustedError("probe: pinned or device allocation failed");
  }
  for (void*& p : pieces) {
    if (cudaHostAlloc(&p, piece, cudaHostAllocDefault) != cudaSuccess)
      return absl::ResourceExhaustedError("probe: pinned or device allocation failed");
    std::memset(p, 1, piece);
  }
  std::memset(host, 1, bytes);
  EventTimer timer;
  auto timed = [&](auto&& work) {
    float best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      timer.Start(s);
      work();
      timer.Stop(s);
      best = std::min(best, timer.Ms());
    }
    return bytes / (best / 1e3) / 1e9;
  };
  const double one = timed([&] { cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s); });
  const double five = timed([&] {
    for (int k = 0; k < 5; ++k) {
      cudaMemcpyAsync(static_cast<char*>(dev) + k * piece, pieces[k], piece, cudaMemcpyHostToDevice, s);
    }
  });
  // The same five copies on a side stream while the compute stream runs small kernels (as in a decode step).
  double five_busy = 0;
  {
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    auto x = torch::ones({4096}, torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
    EventTimer copies;
    float best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      cudaDeviceSynchronize();
      for (int k = 0; k < 200; ++k) x.add_(1);  // the compute stream busy first
      copies.Start(side);
      for (int k = 0; k < 5; ++k) {
        cudaMemcpyAsync(static_cast<char*>(dev) + k * piece, pieces[k], piece, cudaMemcpyHostToDevice, side);
      }
      copies.Stop(side);
      for (int k = 0; k < 6000; ++k) x.add_(1);
      best = std::min(best, copies.Ms());
    }
    cudaDeviceSynchronize();
    five_busy = bytes / (best / 1e3) / 1e9;
    cudaStreamDestroy(side);
  }
  for (void* p : pieces) cudaFreeHost(p);
  cudaFreeHost(host);
  cudaFree(dev);
  ASSIGN_OR_RETURN(const uint64_t m, backend->AllocateManaged(bytes));
  auto t = torch::from_blob(reinterpret_cast<void*>(m), {bytes / 2},
                            torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  t.fill_(1);
  cudaDeviceSynchronize();
  const double prefetch = timed([&] {
    cudaMemLocation host_loc{cudaMemLocationTypeHost, 0}, dev_loc{cudaMemLocationTypeDevice, 0};
    cudaMemPrefetchAsync(reinterpret_cast<void*>(m), bytes, host_loc, 0, s);
    cudaDeviceSynchronize();
    timer.Start(s);  // time the device-bound move only
    cudaMemPrefetchAsync(reinterpret_cast<void*>(m), bytes, dev_loc, 0, s);
  });
  // Prefetches that move nothing (the range is already on the device), as a plan re-fetching resident
  // tensors issues them: the calling thread's time and the stream's, per call of 2 MiB and of 64 MiB.
  double resident_call_host_us[2] = {0, 0}, resident_call_stream_us[2] = {0, 0};
  {
    cudaMemLocation dev_loc{cudaMemLocationTypeDevice, 0};
    cudaMemPrefetchAsync(reinterpret_cast<void*>(m), bytes, dev_loc, 0, s);
    cudaDeviceSynchronize();
    for (int k = 0; k < 2; ++k) {
      const int64_t piece = k == 0 ? int64_t{2} << 20 : int64_t{64} << 20;
      const int64_t calls = bytes / piece;
      timer.Start(s);
      const auto t0 = Clock::now();
      for (int64_t c = 0; c < calls; ++c) {
        cudaMemPrefetchAsync(reinterpret_cast<void*>(m + c * piece), piece, dev_loc, 0, s);
      }
      const double host_s = Seconds(t0, Clock::now());
      timer.Stop(s);
      resident_call_host_us[k] = 1e6 * host_s / calls;
      resident_call_stream_us[k] = 1e3 * timer.Ms() / calls;
    }
  }
  RETURN_IF_ERROR(backend->Prefetch(m, bytes, Location::kHost, Stream::kCompute));
  RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kPreferredLocation, true, Location::kHost));
  RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kAccessedBy, true));
  cudaDeviceSynchronize();
  const double remote = timed([&] { (void)t.sum(); });
  RETURN_IF_ERROR(backend->FreeManaged(m));
  std::printf(
      "link probe, 1 GiB host->device: pinned copy %.1f GB/s (one call), %.1f GB/s (five buffers in turn), "
      "%.1f GB/s (five buffers on a side stream beside small kernels); managed: prefetch %.1f GB/s, remote-mapped "
      "read by a reduction %.1f GB/s; a prefetch of a range already on the device: %.1f us of the calling thread, "
      "%.1f us of the stream per 2 MiB call (%.1f / %.1f us per 64 MiB call)\n",
      one, five, five_busy, prefetch, remote, resident_call_host_us[0], resident_call_stream_us[0],
      resident_call_host_us[1], resident_call_stream_us[1]);
  return absl::OkStatus();
}

// How to drop the device copy of a weight streamed through the device, without copying it back and
// within a budget the card does not enforce (cudaMemGetInfo does not see managed memory, so residency
// is read from the time a GPU reduction over the range takes: HBM speed if resident, link speed if not).
// The range is read-mostly with preferred location host and accessed by the device; each round
// prefetches it to the device, then tries one way of dropping it.
absl::Status ProbeDrop(runtime::DeviceBackend* backend) {
  using runtime::Advice;
  const int64_t bytes = int64_t{1} << 30;
  ASSIGN_OR_RETURN(const uint64_t m, backend->AllocateManaged(bytes));
  auto t = torch::from_blob(reinterpret_cast<void*>(m), {bytes / 2},
                            torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  t.fill_(1);
  cudaStream_t s = c10::cuda::getCurrentCUDAStream().stream();
  cudaDeviceSynchronize();
  RETURN_IF_ERROR(backend->Prefetch(m, bytes, Location::kHost, Stream::kCompute));
  RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kPreferredLocation, true, Location::kHost));
  RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kAccessedBy, true));
  RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kReadMostly, true));
  cudaDeviceSynchronize();
  EventTimer timer;
  auto read_ms = [&] {
    timer.Start(s);
    (void)t.sum();
    timer.Stop(s);
    return timer.Ms();
  };
  absl::Status failed;  // the first error of a call made inside a timed lambda
  auto keep = [&](absl::Status s) {
    if (failed.ok()) failed = std::move(s);
  };
  auto host_ms = [](auto&& f) {
    const auto t0 = Clock::now();
    f();
    return 1e3 * Seconds(t0, Clock::now());
  };
  std::printf(
      "drop probe, 1 GiB read-mostly, preferred host, accessed by the device; a read when on the host: %.2f ms\n",
      read_ms());
  for (const std::string way : {"unset read-mostly", "prefetch to host", "unset + set read-mostly"}) {
    ASSIGN_OR_RETURN(const UvmCounters c0, backend->ReadCounters());
    const double in_ms = host_ms([&] {
      keep(backend->Prefetch(m, bytes, Location::kDevice, Stream::kCompute));
      cudaStreamSynchronize(s);
    });
    const float resident_ms = read_ms();
    double drop_ms = 0;
    if (way == "prefetch to host") {
      drop_ms = host_ms([&] {
        keep(backend->Prefetch(m, bytes, Location::kHost, Stream::kCompute));
        cudaStreamSynchronize(s);
      });
    } else {
      drop_ms = host_ms([&] { keep(backend->Advise(m, bytes, Advice::kReadMostly, false)); });
      if (way == "unset + set read-mostly") {
        drop_ms += host_ms([&] { keep(backend->Advise(m, bytes, Advice::kReadMostly, true)); });
      }
    }
    const float after_ms = read_ms();
    const float again_ms = read_ms();
    cudaDeviceSynchronize();
    RETURN_IF_ERROR(failed);
    ASSIGN_OR_RETURN(const UvmCounters moved_total, backend->ReadCounters());
    const UvmCounters moved = moved_total - c0;
    std::printf(
        "  %s: prefetch in %.2f ms, read %.2f ms; drop %.2f ms; reads after it %.2f, %.2f ms; this round moved %.2f "
        "GiB "
        "host->device, %.2f GiB device->host, %lld fault groups\n",
        way.c_str(), in_ms, resident_ms, drop_ms, after_ms, again_ms, moved.h2d_total() / kGiB,
        moved.d2h_total() / kGiB, (long long)moved.gpu_fault_groups);
    if (way == "unset read-mostly") RETURN_IF_ERROR(backend->Advise(m, bytes, Advice::kReadMostly, true));
  }
  RETURN_IF_ERROR(backend->FreeManaged(m));
  return absl::OkStatus();
}

// The emulated driver eviction's traffic (runtime/driver_eviction.h): a weight-sized range goes back
// to the host by prefetches on the compute stream and returns when next needed, every step. Here 4 GiB
// in 64 MiB calls, written once on the device, then moved to the host and back eight times; before the
// last four trips to the host the process sits idle for 3 s (long enough for a guest's free page
// reporting to hand the host pages the last trip freed back to the hypervisor).
absl::Status ProbeEvictionCycles(runtime::DeviceBackend* backend) {
  const int64_t bytes = int64_t{4} << 30, call = int64_t{64} << 20;
  ASSIGN_OR_RETURN(const uint64_t m, backend->AllocateManaged(bytes));
  auto t = torch::from_blob(reinterpret_cast<void*>(m), {bytes / 2},
                            torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA));
  t.fill_(1);
  cudaDeviceSynchronize();
  auto move_s = [&](Location to) -> absl::StatusOr<double> {
    const auto t0 = Clock::now();
    for (int64_t off = 0; off < bytes; off += call) {
      RETURN_IF_ERROR(backend->Prefetch(m + static_cast<uint64_t>(off), call, to, Stream::kCompute));
    }
    RETURN_IF_ERROR(backend->Synchronize());
    return Seconds(t0, Clock::now());
  };
  std::printf("eviction cycles, 4 GiB in 64 MiB prefetches, GB/s device->host / host->device:");
  for (int cycle = 0; cycle < 8; ++cycle) {
    if (cycle >= 4) std::this_thread::sleep_for(std::chrono::seconds(3));
    ASSIGN_OR_RETURN(const double out_s, move_s(Location::kHost));
    ASSIGN_OR_RETURN(const double in_s, move_s(Location::kDevice));
    std::printf("%s %.1f / %.1f%s", cycle == 0 ? "" : ",", bytes / out_s / 1e9, bytes / in_s / 1e9,
                cycle == 4 ? " (after 3 s idle)" : "");
  }
  std::printf("\n");
  return backend->FreeManaged(m);
}

absl::Status ProbePlacement(runtime::DeviceBackend* backend) {
  constexpr int kRanges = 16;
  const int64_t each = int64_t{128} << 20;
  struct Placed {
    const char* how;
    std::vector<uint64_t> ranges;
    std::vector<torch::Tensor> views;
  };
  std::vector<Placed> placed = {{"prefetched", {}, {}}, {"faulted in", {}, {}}};
  for (Placed& p : placed) {
    for (int k = 0; k < kRanges; ++k) {
      ASSIGN_OR_RETURN(const uint64_t r, backend->AllocateManaged(each));
      std::memset(reinterpret_cast<void*>(r), 1, static_cast<size_t>(each));  // written on the host
      p.ranges.push_back(r);
      p.views.push_back(torch::from_blob(reinterpret_cast<void*>(r), {each / 2},
                                         torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA)));
    }
  }
  for (uint64_t r : placed[0].ranges) RETURN_IF_ERROR(backend->Prefetch(r, each, Location::kDevice, Stream::kCopy));
  RETURN_IF_ERROR(backend->Synchronize());
  for (const torch::Tensor& v : placed[1].views) (void)v.sum(torch::kFloat).item<float>();  // faults them in
  for (Placed& p : placed) {
    std::vector<torch::Tensor> sums;
    for (const torch::Tensor& v : p.views) sums.push_back(v.sum(torch::kFloat));  // warm
    cudaDeviceSynchronize();
    const UvmCounters before = *backend->ReadCounters();
    constexpr int kReps = 10;
    const auto t0 = Clock::now();
    for (int rep = 0; rep < kReps; ++rep) {
      for (const torch::Tensor& v : p.views) sums.push_back(v.sum(torch::kFloat));
    }
    cudaDeviceSynchronize();
    const double s = Seconds(t0, Clock::now());
    RETURN_IF_ERROR(backend->Synchronize());
    const UvmCounters moved = *backend->ReadCounters() - before;
    std::printf("placement: reductions over 2 GiB %s: %.1f GB/s on the device (%.2f GiB migrated meanwhile)\n", p.how,
                kReps * kRanges * static_cast<double>(each) / s / 1e9, moved.h2d_total() / kGiB);
  }
  for (Placed& p : placed) {
    p.views.clear();
    for (uint64_t r : p.ranges) RETURN_IF_ERROR(backend->FreeManaged(r));
  }
  return absl::OkStatus();
}

// Pinned host->device copies (1 GiB in eight calls on a side stream) timed alone and while resident decode
// steps run on the compute stream: does the model's compute slow the copy engine down?
absl::Status ProbeCopyBesideDecode(DecodeModel& m, const std::vector<int64_t>& first_tokens, int64_t pos) {
  // A diagnostic: 1 GiB of pinned host->device copies on a side stream while resident decode steps
  // run on the compute stream — does the model's compute slow the copy engine down?
  const int64_t bytes = int64_t{1} << 30;
  void *host = nullptr, *dev = nullptr;
  if (cudaHostAlloc(&host, bytes, cudaHostAllocDefault) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess) {
    return absl::ResourceExhaustedError("copy-beside-decode: pinned or device allocation failed");
  }
  std::memset(host, 1, bytes);
  cudaStream_t side;
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  EventTimer copies;
  for (const bool beside : {false, true}) {
    cudaDeviceSynchronize();
    const auto t0 = Clock::now();
    copies.Start(side);
    for (int k = 0; k < 8; ++k) {
      cudaMemcpyAsync(static_cast<char*>(dev) + k * (bytes / 8), static_cast<char*>(host) + k * (bytes / 8), bytes / 8,
                      cudaMemcpyHostToDevice, side);
    }
    copies.Stop(side);
    std::vector<int64_t> tok = first_tokens;
    int decoded = 0;
    while (beside && !copies.Stopped()) {
      tok = DecodeStep(m, tok, pos);
      ++decoded;
    }
    const float ms = copies.Ms();
    std::printf("copy beside decode: 1 GiB pinned copy %.1f GB/s %s (%d resident steps in %.1f ms)\n",
                bytes / (ms / 1e3) / 1e9, beside ? "while decode steps run" : "alone", decoded,
                1e3 * Seconds(t0, Clock::now()));
  }
  cudaStreamDestroy(side);
  cudaFreeHost(host);
  cudaFree(dev);
  return absl::OkStatus();
}

}  // namespace autouvm::bench
