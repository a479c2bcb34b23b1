// CodedStager: copies exponent-coded host copies of weights over the link into a small ring of landing
// slots on the device and decodes each there into the weight's place (Note [Coded staging in chunks],
// runtime/weight_codec.h): the link carries the coded bytes, the compute stream sees the same bf16
// tensor a plain copy would have given it. Copies run on the caller's copy stream, decodes on a stream
// of the stager's own, so chunk k + 1 crosses the link while chunk k decodes.
//
//   ASSIGN_OR_RETURN(auto stager, CodedStager::Create(copy_stream, 16 << 20, 2));
//   ASSIGN_OR_RETURN(CodedCopy coded, CodedCopy::Of(pinned_encoding, bytes, stager->slot_bytes()));
//   RETURN_IF_ERROR(stager->Stage(coded, device_out));
//   cudaEventRecord(ready, stager->Tail());   // after every copy and decode queued so far
//
// Thread-safety: one thread drives a stager (the backend's).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/weight_codec.h"

namespace autouvm::runtime::cuda {

// A coded host copy: the encoding in pinned host memory (16-byte aligned), its header and its chunks
// for the stager's slots.
struct CodedCopy {
  const uint8_t* host = nullptr;
  weight_codec::Header header;
  std::vector<weight_codec::Chunk> chunks;
  int64_t link_bytes = 0;  // what its staging moves over the link

  // INVALID_ARGUMENT for an encoding ReadHeader refuses, a plain one, or a misaligned pointer.
  static absl::StatusOr<CodedCopy> Of(const uint8_t* host, int64_t bytes, int64_t slot_bytes);
};

class CodedStager {
 public:
  // `copy_stream` is a cudaStream_t; `slots` landing slots of `slot_bytes` each (device memory). An
  // untimed stager records no timing events: one that stages into CUDA graphs (Note [Coded copies
  // captured], runtime/cuda/cuda_backend_capture.cc), whose decode_ns() stays 0.
  static absl::StatusOr<std::unique_ptr<CodedStager>> Create(void* copy_stream, int64_t slot_bytes, int slots,
                                                             bool timed = true);
  ~CodedStager();
  CodedStager(const CodedStager&) = delete;
  CodedStager& operator=(const CodedStager&) = delete;

  // Queues `coded`'s copy and decode into `out` (device memory, header.count bf16 values, 16-byte
  // aligned): each chunk waits for its slot's last decode, crosses on the copy stream, and is decoded on
  // the decode stream once it has landed.
  absl::Status Stage(const CodedCopy& coded, uint16_t* out);
  // A stream (cudaStream_t) on which work recorded now follows everything queued so far on the copy
  // stream and every decode: the copy stream itself until a first decode.
  void* Tail();
  // Waits for the copy stream and the decodes.
  absl::Status Synchronize();
  // Forgets the slots' last uses and the decodes queued: for a stager whose copy stream a new CUDA graph
  // capture has just forked, so that nothing in the capture waits on an event recorded outside it.
  void Restart();
  // Whether a decode was queued since Create or Restart (Tail() is then the decode stream).
  bool decoded() const { return decoded_; }

  // The decoder's GPU time so far, over the decodes whose timing events have been read: each chunk's
  // kernel is timed by a pair of events, read when the pair is reused or at Synchronize. Any thread.
  int64_t decode_ns() const { return decode_ns_.load(std::memory_order_relaxed); }

  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t device_bytes() const { return slot_bytes_ * static_cast<int64_t>(slots_.size()); }

 private:
  struct Slot {
    void* landing = nullptr;
    void* landed = nullptr;  // cudaEvent_t: its chunk has crossed
    void* free = nullptr;    // cudaEvent_t: its last decode is done
    bool used = false;
  };
  struct Timer {
    void* start = nullptr;  // cudaEvent_t, timed
    void* end = nullptr;
    bool pending = false;
  };
  static constexpr int kTimers = 256;
  void Harvest(Timer& timer);
  CodedStager() = default;
  void* copy_ = nullptr;
  void* decode_ = nullptr;  // cudaStream_t
  void* joined_ = nullptr;  // cudaEvent_t
  int64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  size_t next_ = 0;
  bool decoded_ = false;
  std::vector<Timer> timers_;  // empty when untimed
  size_t next_timer_ = 0;
  std::atomic<int64_t> decode_ns_{0};
};

}  // namespace autouvm::runtime::cuda
