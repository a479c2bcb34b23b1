// libFuzzer target: what the profile store reads back from RocksDB (profiler/profile_codec.h: a sealed
// value with its checksum), the plan the executor is given from it (runtime/plan_proto.h) and the keys it
// is stored under (profiler/profile_key.h). Never crashes; a value that opens re-seals to the same
// bytes' payload; a plan that converts comes back the same through its message; a key that parses encodes back
// to itself.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "autouvm/v1/profile.pb.h"
#include "profiler/profile_codec.h"
#include "profiler/profile_key.h"
#include "runtime/plan_proto.h"

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto profile = autouvm::profiler::OpenValue<autouvm::v1::Profile>(bytes, "fuzz");
  if (profile.ok()) {
    auto again = autouvm::profiler::OpenValue<autouvm::v1::Profile>(autouvm::profiler::SealValue(*profile), "again");
    Check(again.ok());
  }
  auto stored = autouvm::profiler::OpenValue<autouvm::v1::Plan>(bytes, "fuzz");
  autouvm::v1::Plan message;
  if (stored.ok())
    message = *stored;
  else if (!message.ParseFromString(bytes))
    message.Clear();
  if (auto plan = autouvm::runtime::FromProto(message); plan.ok()) {
    auto back = autouvm::runtime::FromProto(autouvm::runtime::ToProto(*plan, message.key()));
    Check(back.ok() && *back == *plan);
  }
  auto key = autouvm::profiler::ParseKey(bytes);
  if (key.ok()) {
    const std::string encoded = autouvm::profiler::EncodeKey(*key);
    auto back = autouvm::profiler::ParseKey(encoded);
    Check(back.ok() && autouvm::profiler::EncodeKey(*back) == encoded);
  }
  return 0;
}
