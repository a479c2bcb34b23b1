// The simulator against the H200 measurements in shared/gpu/NOTES.md: the decode-like pass table (32
// bf16 weights of 8192x8192 multiplied by an 8192xB activation; resident, fault-driven, prefetch-ahead,
// remote-mapped, explicit copy; B = 1, 16, 256) and the primitive figures, each within ±15%.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "runtime/sim/sim_backend.h"

namespace autouvm::runtime::sim {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kWeightBytes = 8192LL * 8192 * 2;  // bf16
constexpr int kWeights = 32;
constexpr double kTolerance = 0.15;
constexpr uint64_t kDeviceBuffer = 0x10000;  // outside managed memory: a plain device buffer

std::unique_ptr<SimBackend> H200() {
  auto spec = FindGpuSpec("h200-pcie5");
  EXPECT_TRUE(spec.ok());
  auto sim = SimBackend::Create({.spec = *spec});
  EXPECT_TRUE(sim.ok());
  return std::move(sim).value();
}

// Seconds `work` advances the simulated clocks by.
double Timed(SimBackend& sim, const std::function<void()>& work) {
  EXPECT_TRUE(sim.Synchronize().ok());
  const double start = sim.Elapsed();
  work();
  EXPECT_TRUE(sim.Synchronize().ok());
  return sim.Elapsed() - start;
}

SimKernel Gemv(uint64_t weight, int batch) {
  const int64_t act = 8192LL * batch * 2;
  return SimKernel{.name = "gemm",
                   .ranges = {{weight, kWeightBytes, false, 1.0},
                              {kDeviceBuffer, act, false, 1.0},
                              {kDeviceBuffer + 64 * kMiB, act, true, 1.0}},
                   .flops = 2.0 * 8192 * 8192 * batch};
}

std::vector<uint64_t> Weights(SimBackend& sim) {
  std::vector<uint64_t> w;
  for (int i = 0; i < kWeights; ++i) w.push_back(*sim.AllocateManaged(kWeightBytes));
  return w;
}

enum class Mode { kResident, kFaultDriven, kPrefetchAhead, kRemote, kExplicitCopy };

double DecodePass(Mode mode, int batch) {
  auto sim = H200();
  std::vector<uint64_t> w = Weights(*sim);
  if (mode == Mode::kResident) {
    for (uint64_t a : w) EXPECT_TRUE(sim->Prefetch(a, kWeightBytes, Location::kDevice, Stream::kCopy).ok());
  }
  if (mode == Mode::kRemote) {
    for (uint64_t a : w) {
      EXPECT_TRUE(sim->Advise(a, kWeightBytes, Advice::kPreferredLocation, true, Location::kHost).ok());
      EXPECT_TRUE(sim->Advise(a, kWeightBytes, Advice::kAccessedBy, true, Location::kDevice).ok());
    }
  }
  return Timed(*sim, [&] {
    if (mode == Mode::kExplicitCopy) {
      // Two device buffers: the copy of weight i + 1 overlaps the product with weight i.
      std::vector<EventId> done(kWeights, -1);
      for (int i = 0; i < kWeights; ++i) {
        if (i >= 2) sim->WaitEvent(Stream::kCopy, done[i - 2]);  // its buffer is free again
        sim->Copy(kWeightBytes, Stream::kCopy);
        sim->WaitEvent(Stream::kCompute, sim->RecordEvent(Stream::kCopy));
        sim->Launch(Gemv(kDeviceBuffer + 256 * kMiB * (i % 2 + 1), batch));
        done[i] = sim->RecordEvent(Stream::kCompute);
      }
      return;
    }
    std::vector<EventId> ready;
    if (mode == Mode::kPrefetchAhead) {
      for (uint64_t a : w) {
        EXPECT_TRUE(sim->Prefetch(a, kWeightBytes, Location::kDevice, Stream::kCopy).ok());
        ready.push_back(sim->RecordEvent(Stream::kCopy));
      }
    }
    for (int i = 0; i < kWeights; ++i) {
      if (!ready.empty()) sim->WaitEvent(Stream::kCompute, ready[i]);
      sim->Launch(Gemv(w[i], batch));
    }
  });
}

struct Row {
  std::string what;
  double measured;
  double simulated;
};

void ExpectWithinTolerance(const std::vector<Row>& rows) {
  std::printf("%-58s %12s %12s %8s\n", "figure", "measured", "simulated", "error");
  for (const Row& r : rows) {
    const double error = r.simulated / r.measured - 1;
    std::printf("%-58s %12.4g %12.4g %+7.1f%%\n", r.what.c_str(), r.measured, r.simulated, 100 * error);
    EXPECT_LE(std::abs(error), kTolerance) << r.what << ": measured " << r.measured << ", simulated " << r.simulated;
  }
}

TEST(SimCalibrationTest, DecodePassTableOfTheH200) {
  struct Measured {
    int batch;
    double resident, faults, prefetch, remote, copy;  // ms, NOTES.md
  };
  const Measured table[] = {
      {1, 1.20, 416, 92.6, 84.0, 77.9}, {16, 1.26, 353, 92.0, 84.0, 77.8}, {256, 1.63, 389, 91.0, 84.0, 77.8}};
  std::vector<Row> rows;
  for (const Measured& m : table) {
    const std::string b = " (ms), B=" + std::to_string(m.batch);
    rows.push_back({"resident" + b, m.resident, 1e3 * DecodePass(Mode::kResident, m.batch)});
    rows.push_back({"fault-driven" + b, m.faults, 1e3 * DecodePass(Mode::kFaultDriven, m.batch)});
    rows.push_back(
        {"prefetch ahead on a side stream" + b, m.prefetch, 1e3 * DecodePass(Mode::kPrefetchAhead, m.batch)});
    rows.push_back({"remote-mapped" + b, m.remote, 1e3 * DecodePass(Mode::kRemote, m.batch)});
    rows.push_back({"explicit double-buffered copy" + b, m.copy, 1e3 * DecodePass(Mode::kExplicitCopy, m.batch)});
  }
  ExpectWithinTolerance(rows);
}

// GB/s of moving `bytes` in `seconds`.
double Rate(int64_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

double FaultDrivenRate(bool write) {
  auto sim = H200();
  const uint64_t a = *sim->AllocateManaged(4 * kGiB);
  // NOTES.md's streaming read kernel: 8.6 GB/s = 7.62 µs per page = 4.836 + n · 0.300 + (1 + 32 n / 256) ·
  // 14.86 / 32 with the driver costs of Note [H200 calibration]: n = 6.5 fault entries per page (several
  // SMs touch each page before it is serviced). Its decode pass's GEMV raises one per page.
  const double entries = 6.5;
  return Rate(4 * kGiB, Timed(*sim, [&] {
                sim->Launch({.name = "stream", .ranges = {{a, 4 * kGiB, write, entries}}});
              }));
}

double PrefetchRate(int64_t call_bytes) {
  auto sim = H200();
  const uint64_t a = *sim->AllocateManaged(4 * kGiB);
  return Rate(4 * kGiB, Timed(*sim, [&] {
                for (int64_t off = 0; off < 4 * kGiB; off += call_bytes) {
                  EXPECT_TRUE(sim->Prefetch(a + off, call_bytes, Location::kDevice, Stream::kCopy).ok());
                }
              }));
}

// 4 GiB on the device (written there by a kernel or not) sent to the host in 64 MiB prefetches.
double DeviceToHostRate(bool written) {
  auto sim = H200();
  const uint64_t a = *sim->AllocateManaged(4 * kGiB);
  EXPECT_TRUE(sim->Prefetch(a, 4 * kGiB, Location::kDevice, Stream::kCopy).ok());
  if (written) sim->Launch({.name = "write", .ranges = {{a, 4 * kGiB, true, 1.0}}});
  return Rate(4 * kGiB, Timed(*sim, [&] {
                for (int64_t off = 0; off < 4 * kGiB; off += 64 * kMiB) {
                  EXPECT_TRUE(sim->Prefetch(a + off, 64 * kMiB, Location::kHost, Stream::kCopy).ok());
                }
              }));
}

// µs per touch of a kernel touching one address every `stride` bytes of 256 MiB on the host.
double SparseTouchMicros(int64_t stride) {
  auto sim = H200();
  const int64_t region = 256 * kMiB;
  const uint64_t a = *sim->AllocateManaged(region);
  SimKernel k{.name = "touch"};
  const int64_t page = 64 * 1024;
  if (stride >= page) {
    for (int64_t off = 0; off < region; off += stride) k.ranges.push_back({a + off, 1, false, 1.0});
  } else {  // every page touched at page / stride places, each a fault entry of its own
    for (int64_t off = 0; off < region; off += page) k.ranges.push_back({a + off, page, false, 1.0 * page / stride});
  }
  return 1e6 * Timed(*sim, [&] { sim->Launch(k); }) / static_cast<double>(region / stride);
}

TEST(SimCalibrationTest, PrimitiveFiguresOfTheH200) {
  auto lone_fault = [] {
    auto sim = H200();
    const uint64_t a = *sim->AllocateManaged(2 * kMiB);
    return 1e6 * Timed(*sim, [&] { sim->Launch({.name = "one", .ranges = {{a, 1, false, 1.0}}}); });
  };
  ExpectWithinTolerance({
      {"fault-driven read of 4 GiB on the host (GB/s)", 8.6, FaultDrivenRate(false)},
      {"fault-driven write of 4 GiB on the host (GB/s)", 8.2, FaultDrivenRate(true)},
      {"prefetch host->device, one 4 GiB call (GB/s)", 50.5, PrefetchRate(4 * kGiB)},
      {"prefetch host->device, 64 MiB calls (GB/s)", 44.8, PrefetchRate(64 * kMiB)},
      {"prefetch host->device, 2 MiB calls (GB/s)", 18.2, PrefetchRate(2 * kMiB)},
      // Medians of the eviction probe's trips (bench/results/2026-11-30-dispatch-and-eviction-h200.md).
      {"prefetch device->host in 64 MiB calls, pages not written (GB/s)", 10.15, DeviceToHostRate(false)},
      {"prefetch device->host in 64 MiB calls, pages written (GB/s)", 12.3, DeviceToHostRate(true)},
      {"sparse faults, one touch per 2 MiB (us per touch)", 20, SparseTouchMicros(2 * kMiB)},
      {"sparse faults, one touch per 64 KiB (us per touch)", 5.6, SparseTouchMicros(64 * 1024)},
      {"sparse faults, one touch per 4 KiB (us per touch)", 0.66, SparseTouchMicros(4 * 1024)},
      {"one fault in its own kernel, with the launch (us)", 44, lone_fault()},
  });
}

}  // namespace
}  // namespace autouvm::runtime::sim
