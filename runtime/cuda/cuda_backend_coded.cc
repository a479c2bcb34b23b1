// CudaBackend, its coded host copies (Note [Coded host copies]): adopting what the coder's threads
// encoded, freeing a copy with its coded form, and the copy side that their decodes add to.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/log.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/host_copy_coder.h"
#include "runtime/cuda/pinned_host.h"
#if AUTOUVM_CUDA_KERNELS
#include "runtime/cuda/coded_stager.h"
#endif

namespace autouvm::runtime::cuda {

// Note [Coded host copies]: issue 30. Under a budget each step moves the streamed weights over the link,
// so fewer bytes is the only way past the link's floor. A host copy StageOut or KeepHostCopy makes is
// queued to the HostCopyCoder, whose threads encode it (runtime/weight_codec.h: lossless, about 0.70 of
// the bf16 bytes for Gaussian weights) off the serving path; until its coded form is ready it is staged
// plain, then StageInto sends the coded bytes chunk by chunk through landing slots on the device and
// decodes each into the device buffer (CodedStager; Note [Coded staging in chunks]), so the compute
// stream sees the same bits. The coding is blind to what the bytes hold: any range decodes to itself,
// and one that does not shrink stays plain. The copy side is then two streams, so an event recorded
// for Stream::kCopy is recorded after both (CopyTail). Both copies are kept: StageIn and Unstage use
// the plain one (the managed range's own path).
void CudaBackend::AdoptCoded(uint64_t addr, StagedCopy& copy) {
  if (copy.coding != StagedCopy::Coding::kPending) return;
  std::optional<HostCopyCoder::Coded> done = coder_->Take(addr);
  if (!done.has_value()) return;
  copy.coding = StagedCopy::Coding::kNone;
  // A copy that would not shrink stays plain, as designed; one whose coded form could not be kept is
  // staged plain too, which costs the link its bytes: said once at warning level (then at debug), with
  // the count so far.
  auto fell_back = [&](absl::string_view why) {
    ++plain_fallbacks_;
    const std::string line =
        absl::StrCat("cuda: the coded host copy of the range at 0x", absl::Hex(addr), " could not be kept (", why,
                     "); it is staged plain (", plain_fallbacks_, " so far)");
    if (plain_fallbacks_ == 1) {
      AUTOUVM_LOG(WARNING) << line;
    } else {
      AUTOUVM_LOG(DEBUG) << line;
    }
  };
  if (!done->error.empty()) {
    fell_back(done->error);
    return;
  }
#if AUTOUVM_CUDA_KERNELS
  if (done->memory.ptr == nullptr) {  // it would not shrink
    copy.does_not_shrink = true;
    return;
  }
  absl::StatusOr<CodedCopy> coded =
      CodedCopy::Of(static_cast<const uint8_t*>(done->memory.ptr), done->bytes, stager_->slot_bytes());
  if (!coded.ok()) {
    FreePinnedHost(done->memory.ptr, done->memory.mapped);
    fell_back(coded.status().message());
    return;
  }
  copy.coded_host = done->memory.ptr;
  copy.coded_mapped = done->memory.mapped;
  copy.coded = std::make_shared<CodedCopy>(*std::move(coded));
  copy.coding = StagedCopy::Coding::kCoded;
#else
  if (done->memory.ptr != nullptr) FreePinnedHost(done->memory.ptr, done->memory.mapped);
#endif
}

// Note [Coded sizes in the trace] (runtime/access_trace.cc): what the coder measured, once it has.
std::optional<int64_t> CudaBackend::CodedBytes(uint64_t addr) {
  auto it = staged_.find(addr);
  if (coder_ == nullptr || it == staged_.end()) return std::nullopt;
  StagedCopy& copy = it->second;
  AdoptCoded(addr, copy);
  if (copy.coding == StagedCopy::Coding::kCoded) return copy.coded->link_bytes;
  if (copy.coding == StagedCopy::Coding::kPending) return std::nullopt;
  // Never queued (too small or of odd length), or the coder found it would not shrink: it crosses plain.
  // A coded form that could not be kept (a fallback) says nothing of the weight's code.
  const bool queued = copy.bytes >= options_.coded_min_bytes && copy.bytes % 2 == 0;
  if (!queued || copy.does_not_shrink) return copy.bytes;
  return std::nullopt;
}

void CudaBackend::FreeHostCopy(uint64_t addr, StagedCopy& copy) {
  if (copy.coding == StagedCopy::Coding::kPending && coder_ != nullptr) coder_->Forget(addr);
  if (copy.coded_host != nullptr) FreePinnedHost(copy.coded_host, copy.coded_mapped);
  copy.coded_host = nullptr;
  copy.coded_mapped = 0;
  copy.coded.reset();
  copy.coding = StagedCopy::Coding::kNone;
  FreePinnedHost(copy.host, copy.mapped);
}

uint64_t CudaBackend::StagingEpoch() { return coder_ == nullptr ? 0 : coder_->finished(); }

int64_t CudaBackend::device_bytes() const {
  int64_t bytes = 0;
#if AUTOUVM_CUDA_KERNELS
  if (stager_ != nullptr) bytes += stager_->device_bytes();
  for (const CaptureStreams& c : capture_streams_) {
    if (c.stager != nullptr) bytes += c.stager->device_bytes();
  }
#endif
  return bytes;
}

void CudaBackend::WaitForCodedCopies() {
  if (coder_ == nullptr) return;
  coder_->WaitIdle();
  for (auto& [addr, copy] : staged_) AdoptCoded(addr, copy);
}

}  // namespace autouvm::runtime::cuda
