// CudaBackend while a thread captures a CUDA graph through it (Note [Staged passes captured],
// runtime/executor_capture.cc): the calling thread's streams, the copy stream forked into the capture
// and joined back, and what a graph cannot hold refused.
#include <cuda_runtime.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_backend.h"

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
  // The join: the capture stream waits for the copy stream's last node. Unchecked here: a capture left
  // unjoined fails at cudaStreamEndCapture, which the capturing arena reports.
  (void)cudaEventRecord(static_cast<cudaEvent_t>(it->join), static_cast<cudaStream_t>(c->copy));
  (void)cudaStreamWaitEvent(static_cast<cudaStream_t>(c->compute), static_cast<cudaEvent_t>(it->join), 0);
  captures_.erase(captures_.begin() + (c - captures_.data()));
}

}  // namespace autouvm::runtime::cuda
