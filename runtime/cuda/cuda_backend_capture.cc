// CudaBackend while a thread captures a CUDA graph through it (Note [Staged passes captured],
// runtime/executor_capture.cc): the calling thread's streams, the copy stream forked into the capture
// and joined back, and what a graph cannot hold refused.
#include <cuda_runtime.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cuda/cuda_backend.h"
#if AUTOUVM_CUDA_KERNELS
#include "runtime/cuda/coded_stager.h"
#endif

namespace autouvm::runtime::cuda {
namespace {

absl::Status Failed(const char* what, cudaError_t e) {
  (void)cudaGetLastError();  // a failed capture call leaves a non-sticky error: reported here
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

}  // namespace

const CudaBackend::Capture* CudaBackend::Capturing() const {
  if (captures_.empty()) return nullptr;
  const std::thread::id self = std::this_thread::get_id();
  for (const Capture& c : captures_) {
    if (c.thread == self) return &c;
  }
  return nullptr;
}

absl::Status CudaBackend::RefuseInCapture(const char* what) const {
  if (Capturing() == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, " cannot be captured in a CUDA graph"));
}

// Note [Staged passes captured] (the backend's part): the capture stream is the caller's (the capture
// arena's, in capture mode already). The copy stream of the thread's own waits for an event recorded on
// it, which makes it part of the same capture: the copies and events the executor issues on kCopy are
// graph nodes, ordered against the compute side only by the events between them. Other threads (other
// models) keep the backend's streams, so nothing of theirs is captured here.
absl::Status CudaBackend::BeginCapture(void* stream) {
  if (stream == nullptr) return absl::InvalidArgumentError("no stream to capture on");
  if (Capturing() != nullptr) return absl::FailedPreconditionError("this thread already captures a graph");
  const std::thread::id self = std::this_thread::get_id();
  auto it = std::find_if(capture_streams_.begin(), capture_streams_.end(),
                         [&](const CaptureStreams& c) { return c.thread == self; });
  if (it == capture_streams_.end()) {
    CaptureStreams made{.thread = self};
    cudaStream_t copy = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    if (const cudaError_t e = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking); e != cudaSuccess) {
      return Failed("creating a capture's copy stream", e);
    }
    made.copy = copy;
    cudaError_t e = cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    made.fork = fork;
    made.join = join;
    capture_streams_.push_back(made);  // destroyed with the backend, whatever was made of them
    if (e != cudaSuccess) return Failed("creating a capture's events", e);
    it = capture_streams_.end() - 1;
  }
  const auto on = static_cast<cudaStream_t>(stream);
  const auto copy = static_cast<cudaStream_t>(it->copy);
  const auto fork = static_cast<cudaEvent_t>(it->fork);
  if (const cudaError_t e = cudaEventRecord(fork, on); e != cudaSuccess) return Failed("forking the copy stream", e);
  if (const cudaError_t e = cudaStreamWaitEvent(copy, fork, 0); e != cudaSuccess) {
    return Failed("forking the copy stream", e);
  }
  captures_.push_back({.thread = self, .compute = stream, .copy = it->copy, .first = next_event_});
  return absl::OkStatus();
}

void CudaBackend::EndCapture() {
  const Capture* c = Capturing();
  if (c == nullptr) return;
  const std::thread::id self = c->thread;
  auto it = std::find_if(capture_streams_.begin(), capture_streams_.end(),
                         [&](const CaptureStreams& s) { return s.thread == self; });
  // The join: the capture stream waits for the copy side's last node, the decodes' included (CopyTail).
  // Unchecked here: a capture left unjoined fails at cudaStreamEndCapture, which the capturing arena
  // reports.
  (void)cudaEventRecord(static_cast<cudaEvent_t>(it->join), static_cast<cudaStream_t>(CopyTail()));
  (void)cudaStreamWaitEvent(static_cast<cudaStream_t>(c->compute), static_cast<cudaEvent_t>(it->join), 0);
  captures_.erase(captures_.begin() + (c - captures_.data()));
}

// Note [Coded copies captured]: issue 30 under issue 29's graphs. A staged pass whose weights cross
// coded (Note [Coded host copies], cuda_backend_coded.cc) is captured with its chunks' copies and decodes:
// - The chunks land in slots of the capturing thread's own (a CodedStager whose copy stream is the
//   thread's capture copy stream), not the eager stager's: a replay must not wait on, or overwrite, a slot
//   an eager pass's decode may still read, and a graph cannot wait on an event recorded outside it. The
//   slots' order within a graph is its edges (each chunk waits for its slot's last decode, as eagerly).
//   Across replays nothing is needed: every graph replays on the one compute stream the models share
//   (runtime/cuda/compute_device.cc), so a graph has ended before the next begins.
// - The stager's decode stream joins the capture by waiting on a chunk's landing, and rejoins it at
//   EndCapture through CopyTail, as an event the executor records for the copy side does.
// - Its slots are made at the thread's first captured coded copy, in relaxed capture mode (cudaMalloc is
//   refused during a global-mode capture otherwise); each capture restarts their state. They are
//   device_bytes(): 64 MiB per capturing thread with the default 4 slots of 16 MiB.
// - Nothing in a graph is timed, so the decoder's time (decode_ns) counts eager passes' decodes only;
//   the replays' coded and decoded bytes are counted by CountReplayedStaging.
// - A graph keeps the form each copy had at its capture. A copy coded after it (the coder's threads
//   finish in the background) changes the executor's pass key (DeviceBackend::StagingEpoch), so the pass
//   is captured again once it repeats, with the coded copy.
absl::StatusOr<CodedStager*> CudaBackend::CaptureStager() {
#if AUTOUVM_CUDA_KERNELS
  const std::thread::id self = std::this_thread::get_id();
  auto c = std::find_if(captures_.begin(), captures_.end(), [&](const Capture& x) { return x.thread == self; });
  if (c == captures_.end()) return absl::FailedPreconditionError("this thread captures no graph");
  if (c->stager != nullptr) return c->stager;
  auto it = std::find_if(capture_streams_.begin(), capture_streams_.end(),
                         [&](const CaptureStreams& s) { return s.thread == self; });
  if (it == capture_streams_.end()) return absl::InternalError("a capture without its copy stream");
  if (it->stager == nullptr) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (const cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode); e != cudaSuccess) {
      return Failed("relaxing the capture mode for a graph's landing slots", e);
    }
    absl::StatusOr<std::unique_ptr<CodedStager>> made =
        CodedStager::Create(it->copy, options_.coded_slot_bytes, options_.coded_slots, /*timed=*/false);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);  // back to the capture's own
    if (!made.ok()) return made.status();
    it->stager = std::move(*made);
  }
  it->stager->Restart();
  c->stager = it->stager.get();
  return c->stager;
#else
  return absl::FailedPreconditionError("coded copies need the CUDA kernels");
#endif
}

}  // namespace autouvm::runtime::cuda
