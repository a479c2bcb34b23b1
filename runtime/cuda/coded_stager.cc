#include "runtime/cuda/coded_stager.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cuda/weight_decode.h"

namespace autouvm::runtime::cuda {
namespace {

absl::Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(void* e) { return static_cast<cudaEvent_t>(e); }

}  // namespace

absl::StatusOr<CodedCopy> CodedCopy::Of(const uint8_t* host, int64_t bytes, int64_t slot_bytes) {
  if (reinterpret_cast<uintptr_t>(host) % 16 != 0) {
    return absl::InvalidArgumentError("a coded host copy must be 16-byte aligned");
  }
  const absl::Span<const uint8_t> encoded(host, static_cast<size_t>(bytes));
  CodedCopy c;
  c.host = host;
  ASSIGN_OR_RETURN(c.header, weight_codec::ReadHeader(encoded));
  ASSIGN_OR_RETURN(c.chunks, weight_codec::SplitIntoChunks(encoded, c.header, slot_bytes));
  for (const weight_codec::Chunk& chunk : c.chunks) c.link_bytes += chunk.link_bytes();
  return c;
}

absl::StatusOr<std::unique_ptr<CodedStager>> CodedStager::Create(void* copy_stream, int64_t slot_bytes, int slots,
                                                                 bool timed) {
  if (slot_bytes <= 0 || slot_bytes % 256 != 0 || slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(slots, " landing slots of ", slot_bytes, " bytes (a positive multiple of 256)"));
  }
  std::unique_ptr<CodedStager> s(new CodedStager());
  s->copy_ = copy_stream;
  s->slot_bytes_ = slot_bytes;
  // Note [Decodes at the compute stream's priority]: the daemon computes on a high-priority stream
  // (runtime/cuda/compute_device.cc), whose blocks the GPU schedules before a normal stream's; a decode
  // left behind them keeps its landing slot, and the copy engine waits for the slot. So the decodes get
  // the highest priority too.
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(Check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"));
  cudaStream_t decode = nullptr;
  RETURN_IF_ERROR(
      Check(cudaStreamCreateWithPriority(&decode, cudaStreamNonBlocking, greatest), "creating the decode stream"));
  s->decode_ = decode;
  cudaEvent_t joined = nullptr;
  RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming), "cudaEventCreate"));
  s->joined_ = joined;
  s->slots_.resize(static_cast<size_t>(slots));
  for (Slot& slot : s->slots_) {
    RETURN_IF_ERROR(Check(cudaMalloc(&slot.landing, static_cast<size_t>(slot_bytes)),
                          "cudaMalloc (a landing slot for coded weights)"));
    cudaEvent_t landed = nullptr, free = nullptr;
    RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming), "cudaEventCreate"));
    slot.landed = landed;
    RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&free, cudaEventDisableTiming), "cudaEventCreate"));
    slot.free = free;
  }
  if (timed) s->timers_.resize(kTimers);
  for (Timer& t : s->timers_) {
    cudaEvent_t start = nullptr, end = nullptr;
    RETURN_IF_ERROR(Check(cudaEventCreate(&start), "cudaEventCreate"));
    t.start = start;
    RETURN_IF_ERROR(Check(cudaEventCreate(&end), "cudaEventCreate"));
    t.end = end;
  }
  return s;
}

void CodedStager::Harvest(Timer& t) {
  if (!t.pending || cudaEventQuery(E(t.end)) != cudaSuccess) return;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, E(t.start), E(t.end)) == cudaSuccess) {
    decode_ns_.fetch_add(static_cast<int64_t>(ms * 1e6), std::memory_order_relaxed);
  }
  cudaGetLastError();
  t.pending = false;
}

absl::Status CodedStager::Synchronize() {
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(S(copy_)), "synchronizing the copy stream"));
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(S(decode_)), "synchronizing the decode stream"));
  for (Timer& t : timers_) Harvest(t);  // every decode is done: all of their times are in
  return absl::OkStatus();
}

CodedStager::~CodedStager() {
  if (decode_ != nullptr) cudaStreamSynchronize(S(decode_));
  for (Slot& slot : slots_) {
    if (slot.landing != nullptr) cudaFree(slot.landing);
    if (slot.landed != nullptr) cudaEventDestroy(E(slot.landed));
    if (slot.free != nullptr) cudaEventDestroy(E(slot.free));
  }
  for (Timer& t : timers_) {
    if (t.start != nullptr) cudaEventDestroy(E(t.start));
    if (t.end != nullptr) cudaEventDestroy(E(t.end));
  }
  if (joined_ != nullptr) cudaEventDestroy(E(joined_));
  if (decode_ != nullptr) cudaStreamDestroy(S(decode_));
}

absl::Status CodedStager::Stage(const CodedCopy& coded, uint16_t* out) {
  for (const weight_codec::Chunk& chunk : coded.chunks) {
    if (chunk.landing_bytes > slot_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("a chunk of ", chunk.landing_bytes, " bytes for landing slots of ", slot_bytes_));
    }
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (slot.used) RETURN_IF_ERROR(Check(cudaStreamWaitEvent(S(copy_), E(slot.free), 0), "waiting for a landing slot"));
    for (const weight_codec::Chunk::Piece* p :
         {&chunk.signs, &chunk.indices, &chunk.escape_starts, &chunk.escape_exponents}) {
      if (p->bytes == 0) continue;
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(static_cast<uint8_t*>(slot.landing) + p->landing, coded.host + p->offset,
                                            static_cast<size_t>(p->bytes), cudaMemcpyHostToDevice, S(copy_)),
                            "cudaMemcpyAsync (a coded weight's chunk)"));
    }
    RETURN_IF_ERROR(Check(cudaEventRecord(E(slot.landed), S(copy_)), "cudaEventRecord"));
    RETURN_IF_ERROR(Check(cudaStreamWaitEvent(S(decode_), E(slot.landed), 0), "cudaStreamWaitEvent"));
    Timer* timer = nullptr;
    if (!timers_.empty()) {
      timer = &timers_[next_timer_];
      next_timer_ = (next_timer_ + 1) % timers_.size();
      Harvest(*timer);  // a pair still pending here (the GPU far behind) goes unread: its time is lost
      RETURN_IF_ERROR(Check(cudaEventRecord(E(timer->start), S(decode_)), "cudaEventRecord"));
    }
    RETURN_IF_ERROR(LaunchWeightDecodeChunk(slot.landing, coded.header, chunk, out, decode_));
    if (timer != nullptr) {
      RETURN_IF_ERROR(Check(cudaEventRecord(E(timer->end), S(decode_)), "cudaEventRecord"));
      timer->pending = true;
    }
    RETURN_IF_ERROR(Check(cudaEventRecord(E(slot.free), S(decode_)), "cudaEventRecord"));
    slot.used = true;
    decoded_ = true;
  }
  return absl::OkStatus();
}

void CodedStager::Restart() {
  for (Slot& slot : slots_) slot.used = false;
  next_ = 0;
  decoded_ = false;
}

void* CodedStager::Tail() {
  if (!decoded_) return copy_;
  // The decode stream after the copy stream's work: everything before, decodes included (an event on
  // the copy stream alone would miss decodes queued before an earlier Tail). Errors here surface at the
  // next synchronization of either stream.
  cudaEventRecord(E(joined_), S(copy_));
  cudaStreamWaitEvent(S(decode_), E(joined_), 0);
  return decode_;
}

}  // namespace autouvm::runtime::cuda
