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

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "runtime/status_macros.h"

namespace autouvm::bench {
namespace {

using runtime::Location;
using runtime::Stream;
using runtime::UvmCounters;
using Clock = std::chrono::steady_clock;

// GPU time between two marks on a stream (a pair of CUDA events): Start, the work, Stop, then Ms.
class EventTimer {
 public:
  EventTimer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void Start(cudaStream_t s) { cudaEventRecord(start_, s); }
  void Stop(cudaStream_t s) { cudaEventRecord(stop_, s); }
  bool Stopped() const { return cudaEventQuery(stop_) != cudaErrorNotReady; }
  float Ms() const {  // waits for the stop mark
    cudaEventSynchronize(stop_);
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

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
// CopyToHost): cudaMemcpy, a plain memcpy on the CPU, or a prefetch to the device and a copy back.
absl::Status ProbeHostCopyFill(runtime::DeviceBackend* backend) {
  const int64_t bytes = int64_t{1} << 30;
  ASSIGN_OR_RETURN(const uint64_t r, backend->AllocateManaged(bytes));
  std::memset(reinterpret_cast<void*>(r), 3, static_cast<size_t>(bytes));
  void* host = nullptr;
  if (cudaHostAlloc(&host, static_cast<size_t>(bytes), cudaHostAllocDefault) != cudaSuccess) {
    return absl::ResourceExhaustedError("host copy probe: cudaHostAlloc failed");
  }
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
    return cudaMemcpy(host, reinterpret_cast<void*>(r), bytes, cudaMemcpyDefault) == cudaSuccess
               ? absl::OkStatus()
               : absl::InternalError("cudaMemcpy");
  }));
  RETURN_IF_ERROR(timed("memcpy on the CPU", [&]() -> absl::Status {
    std::memcpy(host, reinterpret_cast<const void*>(r), static_cast<size_t>(bytes));
    return absl::OkStatus();
  }));
  RETURN_IF_ERROR(timed("prefetch to the device, then cudaMemcpy", [&]() -> absl::Status {
    RETURN_IF_ERROR(backend->Prefetch(r, bytes, Location::kDevice, Stream::kCopy));
    RETURN_IF_ERROR(backend->Synchronize());
    return cudaMemcpy(host, reinterpret_cast<void*>(r), bytes, cudaMemcpyDefault) == cudaSuccess
               ? absl::OkStatus()
               : absl::InternalError("cudaMemcpy");
  }));
  cudaFreeHost(host);
  return backend->FreeManaged(r);
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
