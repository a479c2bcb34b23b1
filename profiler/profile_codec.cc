#include "profiler/profile_codec.h"

#include "autouvm/v1/profile.pb.h"
#include "profiler/profile_key.h"

namespace autouvm::profiler {

std::string SealBytes(std::string_view payload) {
  autouvm::v1::Checksummed sealed;
  sealed.set_payload(std::string(payload));
  sealed.set_sha256(Sha256(payload));
  return sealed.SerializeAsString();
}

std::string SealValue(const google::protobuf::MessageLite& message) { return SealBytes(message.SerializeAsString()); }

absl::StatusOr<std::string> OpenPayload(std::string_view value, std::string_view what) {
  autouvm::v1::Checksummed sealed;
  if (!sealed.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return absl::DataLossError(absl::StrCat(std::string(what), ": not a checksummed value"));
  }
  if (sealed.sha256().size() != 32 || Sha256(sealed.payload()) != sealed.sha256()) {
    return absl::DataLossError(absl::StrCat(std::string(what), ": checksum mismatch"));
  }
  return std::move(*sealed.mutable_payload());
}

}  // namespace autouvm::profiler
