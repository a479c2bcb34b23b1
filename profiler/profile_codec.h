// Stored values carry their own checksum: a profile (or plan) is serialized, wrapped with its SHA-256
// in a Checksummed message, and checked on every read, so that a torn or flipped value is detected
// rather than applied (docs/profile-store.md, "Values").
//
//   std::string value = SealValue(profile);
//   ASSIGN_OR_RETURN(autouvm::v1::Profile p, OpenValue<autouvm::v1::Profile>(value, key));  // DATA_LOSS if bad
//
// Plain functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"

namespace autouvm::profiler {

std::string SealValue(const google::protobuf::MessageLite& message);
// Bytes that are a value already (a plan): sealed as they are; OpenPayload gives them back.
std::string SealBytes(std::string_view payload);
// The payload of a sealed value after its checksum is verified; DATA_LOSS naming `what` otherwise.
absl::StatusOr<std::string> OpenPayload(std::string_view value, std::string_view what);

template <typename Message>
absl::StatusOr<Message> OpenValue(std::string_view value, std::string_view what) {
  absl::StatusOr<std::string> payload = OpenPayload(value, what);
  if (!payload.ok()) return payload.status();
  Message m;
  if (!m.ParseFromString(*payload)) {
    return absl::DataLossError(absl::StrCat(std::string(what), ": the checksum holds but the value does not parse"));
  }
  return m;
}

}  // namespace autouvm::profiler
