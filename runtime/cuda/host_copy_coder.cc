#include "runtime/cuda/host_copy_coder.h"

#include <cstring>

#include "absl/types/span.h"
#include "runtime/weight_codec.h"

namespace autouvm::runtime::cuda {

HostCopyCoder::HostCopyCoder(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
}

HostCopyCoder::~HostCopyCoder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (auto& [addr, coded] : done_) {
    if (coded.memory.ptr != nullptr) FreePinnedHost(coded.memory.ptr, coded.memory.mapped);
  }
}

void HostCopyCoder::Add(uint64_t addr, const void* plain, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({addr, plain, bytes});
  }
  changed_.notify_all();
}

std::optional<HostCopyCoder::Coded> HostCopyCoder::Take(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = done_.find(addr);
  if (it == done_.end()) return std::nullopt;
  Coded c = std::move(it->second);
  done_.erase(it);
  return c;
}

void HostCopyCoder::Forget(uint64_t addr) {
  std::unique_lock<std::mutex> lock(mu_);
  std::erase_if(queue_, [addr](const Job& j) { return j.addr == addr; });
  if (encoding_.count(addr) != 0) {
    forgotten_.insert(addr);
    changed_.wait(lock, [&] { return encoding_.count(addr) == 0; });
  }
  if (auto it = done_.find(addr); it != done_.end()) {
    if (it->second.memory.ptr != nullptr) FreePinnedHost(it->second.memory.ptr, it->second.memory.mapped);
    done_.erase(it);
  }
}

void HostCopyCoder::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return queue_.empty() && encoding_.empty(); });
}

void HostCopyCoder::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Job job = queue_.front();
    queue_.pop_front();
    encoding_.insert(job.addr);
    lock.unlock();

    Coded coded;
    const std::vector<uint8_t> encoded = weight_codec::Encode(
        absl::MakeConstSpan(static_cast<const uint16_t*>(job.plain), static_cast<size_t>(job.bytes / 2)));
    if (encoded[6] == static_cast<uint8_t>(weight_codec::Mode::kExponentCoded)) {
      if (absl::StatusOr<PinnedHost> memory = AllocatePinnedHost(static_cast<int64_t>(encoded.size())); memory.ok()) {
        std::memcpy(memory->ptr, encoded.data(), encoded.size());
        coded.memory = *memory;
        coded.bytes = static_cast<int64_t>(encoded.size());
      } else {
        coded.error = std::string(memory.status().message());
      }
    }

    lock.lock();
    encoding_.erase(job.addr);
    if (forgotten_.erase(job.addr) != 0 || stop_) {
      if (coded.memory.ptr != nullptr) FreePinnedHost(coded.memory.ptr, coded.memory.mapped);
    } else {
      done_[job.addr] = std::move(coded);
      finished_.fetch_add(1, std::memory_order_release);
    }
    changed_.notify_all();
  }
}

}  // namespace autouvm::runtime::cuda
