#include "runtime/serialized_backend.h"

namespace autouvm::runtime {

absl::StatusOr<uint64_t> SerializedBackend::AllocateManaged(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->AllocateManaged(bytes);
}

absl::Status SerializedBackend::FreeManaged(uint64_t addr) {
  absl::MutexLock lock(&mu_);
  return backend_->FreeManaged(addr);
}

absl::Status SerializedBackend::Prefetch(uint64_t addr, int64_t bytes, Location to, Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->Prefetch(addr, bytes, to, stream);
}

absl::Status SerializedBackend::Advise(uint64_t addr, int64_t bytes, Advice advice, bool set, Location location) {
  absl::MutexLock lock(&mu_);
  return backend_->Advise(addr, bytes, advice, set, location);
}

absl::Status SerializedBackend::Discard(uint64_t addr, int64_t bytes, Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->Discard(addr, bytes, stream);
}

absl::Status SerializedBackend::StageOut(uint64_t addr, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->StageOut(addr, bytes);
}

absl::Status SerializedBackend::StageIn(uint64_t addr, int64_t bytes, Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->StageIn(addr, bytes, stream);
}

absl::Status SerializedBackend::Unstage(uint64_t addr, int64_t bytes, Location to) {
  absl::MutexLock lock(&mu_);
  return backend_->Unstage(addr, bytes, to);
}

absl::Status SerializedBackend::ForgetHostCopies(uint64_t addr, int64_t bytes, WhenStaged staged) {
  absl::MutexLock lock(&mu_);
  return backend_->ForgetHostCopies(addr, bytes, staged);
}

int64_t SerializedBackend::HostCopyBytesWithin(uint64_t addr, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  return backend_->HostCopyBytesWithin(addr, bytes);
}

absl::StatusOr<uint64_t> SerializedBackend::AllocateDevice(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->AllocateDevice(bytes);
}

absl::Status SerializedBackend::FreeDevice(uint64_t addr) {
  absl::MutexLock lock(&mu_);
  return backend_->FreeDevice(addr);
}

absl::Status SerializedBackend::StageInto(uint64_t addr, int64_t bytes, uint64_t device_addr, Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->StageInto(addr, bytes, device_addr, stream);
}

absl::Status SerializedBackend::EndStageInto(uint64_t addr, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->EndStageInto(addr, bytes);
}

absl::Status SerializedBackend::KeepHostCopy(uint64_t addr, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->KeepHostCopy(addr, bytes);
}

DeviceBackend::Staging SerializedBackend::StagingOf(uint64_t addr) const {
  absl::MutexLock lock(&mu_);
  return backend_->StagingOf(addr);
}

std::optional<int64_t> SerializedBackend::CodedBytes(uint64_t addr) {
  absl::MutexLock lock(&mu_);
  return backend_->CodedBytes(addr);
}

absl::StatusOr<int64_t> SerializedBackend::ResidentBytes(uint64_t addr, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return backend_->ResidentBytes(addr, bytes);
}

EventId SerializedBackend::RecordEvent(Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->RecordEvent(stream);
}

void SerializedBackend::WaitEvent(Stream stream, EventId event) {
  absl::MutexLock lock(&mu_);
  return backend_->WaitEvent(stream, event);
}

absl::Status SerializedBackend::Synchronize() {
  absl::MutexLock lock(&mu_);
  return backend_->Synchronize();
}

EventId SerializedBackend::RecordTimedEvent(Stream stream) {
  absl::MutexLock lock(&mu_);
  return backend_->RecordTimedEvent(stream);
}

absl::StatusOr<double> SerializedBackend::ElapsedSeconds(EventId from, EventId to) {
  absl::MutexLock lock(&mu_);
  return backend_->ElapsedSeconds(from, to);
}

absl::StatusOr<UvmCounters> SerializedBackend::ReadCounters() {
  absl::MutexLock lock(&mu_);
  return backend_->ReadCounters();
}

absl::StatusOr<UvmCounters> SerializedBackend::DeliveredCounters() {
  absl::MutexLock lock(&mu_);
  return backend_->DeliveredCounters();
}

absl::Status SerializedBackend::BeginCapture(void* stream) {
  absl::MutexLock lock(&mu_);
  return backend_->BeginCapture(stream);
}

void SerializedBackend::EndCapture() {
  absl::MutexLock lock(&mu_);
  backend_->EndCapture();
}

DeviceBackend::StagingTally SerializedBackend::StagingSoFar() {
  absl::MutexLock lock(&mu_);
  return backend_->StagingSoFar();
}

void SerializedBackend::CountReplayedStaging(const StagingTally& pass) {
  absl::MutexLock lock(&mu_);
  backend_->CountReplayedStaging(pass);
}

uint64_t SerializedBackend::StagingEpoch() {
  absl::MutexLock lock(&mu_);
  return backend_->StagingEpoch();
}

}  // namespace autouvm::runtime
