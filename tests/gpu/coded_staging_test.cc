// Coded staging on the GPU (Note [Coded host copies], runtime/cuda/cuda_backend_coded.cc): with
// code_host_copies on, a weight's host copy is coded in the background and StageInto then sends it
// coded and decodes it on the device, so the device buffer holds the same bytes, bit for bit, as a
// plain copy would have put there; the copy side's events cover the decodes, what does not shrink
// crosses plain, and the counters say what crossed coded. Skips without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/weight_codec.h"
#include "tests/gpu/have_device.h"

namespace autouvm::runtime::cuda {
namespace {

constexpr int64_t kMiB = 1 << 20;

using autouvm::testing::HaveCudaDevice;

// Host copies of 1 MiB or more coded, through two landing slots of 4 MiB.
absl::StatusOr<std::unique_ptr<CudaBackend>> CodingBackend() {
  return CudaBackend::Create({.spec = *FindGpuSpec("h200-pcie5"),
                              .code_host_copies = true,
                              .coded_min_bytes = kMiB,
                              .coded_slot_bytes = 4 * kMiB,
                              .coded_slots = 2});
}

TEST(CodedStagingTest, StageIntoDeliversTheSameBytesCodedAndPlain) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto made = CodingBackend();
  ASSERT_TRUE(made.ok()) << made.status();
  CudaBackend& gpu = **made;
  ASSERT_TRUE(gpu.coding()) << "the CUDA kernels are built where this test is";
  EXPECT_EQ(gpu.device_bytes(), 2 * 4 * kMiB);
  // A 40 MiB Gaussian weight (coded, many chunks), a 3 MiB one whose size is no multiple of a block, one
  // of random bits (does not shrink: plain), and a small one under coded_min_bytes (plain).
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0, 0.02f);
  struct Weight {
    int64_t bytes;
    bool gaussian;
    uint64_t addr = 0;
    std::vector<uint16_t> values;
  };
  std::vector<Weight> weights = {{40 * kMiB, true}, {3 * kMiB + 130, true}, {6 * kMiB, false}, {kMiB / 2, true}};
  // Each weight's place in the device buffer: one after another, at multiples of 256 bytes.
  auto padded = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  int64_t total = 0;
  for (Weight& w : weights) {
    w.values.resize(static_cast<size_t>(w.bytes / 2));
    for (auto& v : w.values) v = w.gaussian ? weight_codec::RoundToBf16(normal(rng)) : static_cast<uint16_t>(rng());
    auto addr = gpu.AllocateManaged(w.bytes);
    ASSERT_TRUE(addr.ok()) << addr.status();
    w.addr = *addr;
    std::memcpy(reinterpret_cast<void*>(w.addr), w.values.data(), static_cast<size_t>(w.bytes));
    EXPECT_FALSE(gpu.CodedBytes(w.addr).has_value()) << "no host copy yet";
    ASSERT_TRUE(gpu.KeepHostCopy(w.addr, w.bytes).ok());
    total += padded(w.bytes);
  }
  gpu.WaitForCodedCopies();
  // Note [Coded sizes in the trace]: what each crosses as, as the plans are told.
  int64_t crosses = 0;
  for (const Weight& w : weights) {
    const std::optional<int64_t> n = gpu.CodedBytes(w.addr);
    ASSERT_TRUE(n.has_value()) << w.bytes << " bytes";
    if (w.gaussian && w.bytes >= kMiB) {
      EXPECT_LT(*n, w.bytes * 3 / 4) << w.bytes << " bytes";
    } else {
      EXPECT_EQ(*n, w.bytes) << w.bytes << " bytes, plain";
    }
    crosses += *n;
  }
  auto buffer = gpu.AllocateDevice(total);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const UvmCounters before = *gpu.ReadCounters();
  for (int round = 0; round < 2; ++round) {  // the landing slots reused across rounds
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(*buffer), 0xAB, static_cast<size_t>(total)), cudaSuccess);
    uint64_t at = *buffer;
    for (const Weight& w : weights) {
      ASSERT_TRUE(gpu.StageInto(w.addr, w.bytes, at, Stream::kCopy).ok());
      at += static_cast<uint64_t>(padded(w.bytes));
    }
    // What the compute stream sees after waiting on the copy side's event.
    gpu.WaitEvent(Stream::kCompute, gpu.RecordEvent(Stream::kCopy));
    ASSERT_TRUE(gpu.Synchronize().ok());
    at = *buffer;
    for (const Weight& w : weights) {
      std::vector<uint16_t> back(w.values.size());
      ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(at), static_cast<size_t>(w.bytes), cudaMemcpyDefault),
                cudaSuccess);
      EXPECT_EQ(back, w.values) << w.bytes << " bytes, round " << round;
      at += static_cast<uint64_t>(padded(w.bytes));
    }
  }
  const UvmCounters moved = *gpu.ReadCounters() - before;
  const int64_t coded_raw = 2 * (weights[0].bytes + weights[1].bytes);
  EXPECT_EQ(moved.decoded_bytes, coded_raw) << "the Gaussian weights of 1 MiB or more cross coded";
  EXPECT_GT(moved.coded_bytes, 0);
  EXPECT_LT(static_cast<double>(moved.coded_bytes), 0.75 * static_cast<double>(coded_raw));
  EXPECT_EQ(moved.h2d(MigrationCause::kStaged), moved.coded_bytes + 2 * (weights[2].bytes + weights[3].bytes))
      << "the others cross plain";
  EXPECT_GT(moved.decode_ns, 0);
  EXPECT_EQ(moved.h2d(MigrationCause::kStaged), 2 * crosses) << "CodedBytes says what StageInto moves";
  // A kept copy is the range's staging: refused unless dropped; dropped and freed with its coded copy.
  EXPECT_EQ(gpu.ForgetHostCopies(weights[0].addr, weights[0].bytes, DeviceBackend::WhenStaged::kRefuse).code(),
            absl::StatusCode::kFailedPrecondition);
  for (const Weight& w : weights) {
    EXPECT_TRUE(gpu.ForgetHostCopies(w.addr, w.bytes, DeviceBackend::WhenStaged::kDrop).ok());
    EXPECT_EQ(gpu.HostCopyBytesWithin(w.addr, w.bytes), 0);
    EXPECT_FALSE(gpu.CodedBytes(w.addr).has_value());
    EXPECT_TRUE(gpu.FreeManaged(w.addr).ok());
  }
  EXPECT_TRUE(gpu.FreeDevice(*buffer).ok());
}

// Note [Coded copies captured] (runtime/cuda/cuda_backend_capture.cc): coded copies staged while a thread
// captures a CUDA graph (in global mode, as libtorch's graphs are) go into the graph, through landing
// slots of the thread's own; each replay puts the same bytes in the buffer, and an eager staging between
// replays (the backend's own slots) does too.
TEST(CodedStagingTest, CodedCopiesCapturedInAGraphDeliverTheSameBytesAtEveryReplay) {
  if (!HaveCudaDevice()) GTEST_SKIP() << "no CUDA device";
  auto made = CodingBackend();
  ASSERT_TRUE(made.ok()) << made.status();
  CudaBackend& gpu = **made;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 0.02f);
  const std::vector<int64_t> sizes = {24 * kMiB, 5 * kMiB + 2, 9 * kMiB};
  std::vector<uint64_t> addrs;
  std::vector<std::vector<uint16_t>> values;
  auto padded = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  int64_t total = 0;
  for (int64_t bytes : sizes) {
    values.emplace_back(static_cast<size_t>(bytes / 2));
    for (auto& v : values.back()) v = weight_codec::RoundToBf16(normal(rng));
    auto addr = gpu.AllocateManaged(bytes);
    ASSERT_TRUE(addr.ok()) << addr.status();
    addrs.push_back(*addr);
    std::memcpy(reinterpret_cast<void*>(*addr), values.back().data(), static_cast<size_t>(bytes));
    ASSERT_TRUE(gpu.KeepHostCopy(*addr, bytes).ok());
    total += padded(bytes);
  }
  gpu.WaitForCodedCopies();
  auto buffer = gpu.AllocateDevice(total);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  auto stage_all = [&]() -> absl::Status {
    uint64_t at = *buffer;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (absl::Status s = gpu.StageInto(addrs[i], sizes[i], at, Stream::kCopy); !s.ok()) return s;
      at += static_cast<uint64_t>(padded(sizes[i]));
    }
    gpu.WaitEvent(Stream::kCompute, gpu.RecordEvent(Stream::kCopy));
    return absl::OkStatus();
  };
  auto expect_buffer = [&](const char* when) {
    uint64_t at = *buffer;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint16_t> back(values[i].size());
      ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(at), static_cast<size_t>(sizes[i]), cudaMemcpyDefault),
                cudaSuccess);
      EXPECT_EQ(back, values[i]) << sizes[i] << " bytes, " << when;
      at += static_cast<uint64_t>(padded(sizes[i]));
    }
  };
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const int64_t eager_slots = gpu.device_bytes();
  const UvmCounters before = *gpu.ReadCounters();
  cudaGraphExec_t exec[2] = {nullptr, nullptr};
  for (cudaGraphExec_t& e : exec) {  // two graphs: the second capture restarts the slots' state
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_TRUE(gpu.BeginCapture(stream).ok());
    const absl::Status staged = stage_all();
    gpu.EndCapture();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_TRUE(staged.ok()) << staged;
    ASSERT_EQ(cudaGraphInstantiate(&e, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  const UvmCounters captured = *gpu.ReadCounters() - before;
  EXPECT_EQ(captured.decoded_bytes, 2 * (sizes[0] + sizes[1] + sizes[2])) << "each capture counts as one staging";
  EXPECT_EQ(gpu.device_bytes(), eager_slots + 2 * 4 * kMiB) << "the capturing thread's landing slots";
  for (int replay = 0; replay < 3; ++replay) {
    for (cudaGraphExec_t e : exec) {
      ASSERT_EQ(cudaMemsetAsync(reinterpret_cast<void*>(*buffer), 0xCD, static_cast<size_t>(total), stream),
                cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(e, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      expect_buffer("replayed");
    }
    ASSERT_EQ(cudaMemset(reinterpret_cast<void*>(*buffer), 0xCD, static_cast<size_t>(total)), cudaSuccess);
    ASSERT_TRUE(stage_all().ok());  // eagerly, between replays
    ASSERT_TRUE(gpu.Synchronize().ok());
    expect_buffer("staged eagerly");
  }
  for (cudaGraphExec_t e : exec) cudaGraphExecDestroy(e);
  cudaStreamDestroy(stream);
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(gpu.ForgetHostCopies(addrs[i], sizes[i], DeviceBackend::WhenStaged::kDrop).ok());
    EXPECT_TRUE(gpu.FreeManaged(addrs[i]).ok());
  }
  EXPECT_TRUE(gpu.FreeDevice(*buffer).ok());
}

}  // namespace
}  // namespace autouvm::runtime::cuda
