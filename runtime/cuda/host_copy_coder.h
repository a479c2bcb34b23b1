// HostCopyCoder: the exponent-coded forms (runtime/weight_codec.h) of staged weights' host copies,
// encoded by threads of its own, off the serving path: the backend queues each host copy as it makes
// it, stages it plain until its coded form is ready, and coded from then on (Note [Coded host copies],
// cuda_backend_coded.cc).
//
//   coder.Add(addr, plain_copy, bytes);           // plain_copy stays valid until Forget(addr)
//   if (std::optional<HostCopyCoder::Coded> c = coder.Take(addr)) ...   // once it is done
//   coder.Forget(addr);                           // before freeing plain_copy
//
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "runtime/cuda/pinned_host.h"

namespace autouvm::runtime::cuda {

class HostCopyCoder {
 public:
  // A finished job: the encoding in pinned memory, or (memory.ptr null) a copy the code would not
  // shrink, or one whose coded copy could not be allocated (`error` says why), staged plain.
  struct Coded {
    PinnedHost memory;
    int64_t bytes = 0;
    std::string error;
  };
  explicit HostCopyCoder(int threads);
  ~HostCopyCoder();  // stops the threads; frees what was not taken
  HostCopyCoder(const HostCopyCoder&) = delete;
  HostCopyCoder& operator=(const HostCopyCoder&) = delete;

  // Queues the encoding of the `bytes` (even) at `plain` as the coded copy of `addr`.
  void Add(uint64_t addr, const void* plain, int64_t bytes);
  // `addr`'s finished job, which the caller then owns; nullopt while it is queued or being encoded (or
  // was never added).
  std::optional<Coded> Take(uint64_t addr);
  // Drops `addr`'s job, waiting for it if a thread is encoding it now, and frees its coded copy.
  void Forget(uint64_t addr);
  // Blocks until no job is queued or being encoded (benchmarks and tests).
  void WaitIdle();
  // Jobs finished so far (taken or not). Any thread.
  uint64_t finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  struct Job {
    uint64_t addr;
    const void* plain;
    int64_t bytes;
  };
  void Work();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  std::set<uint64_t> encoding_;     // addresses a thread is encoding now
  std::set<uint64_t> forgotten_;    // of those, the ones Forget dropped meanwhile
  std::map<uint64_t, Coded> done_;  // finished, not yet taken
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> finished_{0};
};

}  // namespace autouvm::runtime::cuda
