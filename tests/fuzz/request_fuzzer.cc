// libFuzzer target: bytes as they arrive on the gRPC port for Generate and ImportProfiles — parsed as the
// daemon parses them (proto/lenient_parse.h), then a GenerateRequest validated against a small model
// (server/request_validation.h). Never crashes; a request without a defect is valid UTF-8 throughout and
// round-trips through protobuf; validation either refuses naming a field or yields a prompt that fits.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "autouvm/v1/admin.pb.h"
#include "autouvm/v1/generation.pb.h"
#include "proto/lenient_parse.h"
#include "server/request_validation.h"

namespace {

using autouvm::engine::ModelConfig;

const ModelConfig& Model() {
  static const ModelConfig* const kModel = [] {
    auto* m = new ModelConfig();
    m->name = "fuzz";
    m->vocab_size = 320;
    m->max_seq = 64;
    m->bos_id = 256;
    m->eos_id = 257;
    return m;
  }();
  return *kModel;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  autouvm::v1::GenerateRequest request;
  autouvm::proto::LenientParse(bytes, &request);
  const std::string defect = autouvm::proto::RequestDefect(request);
  if (defect.empty()) {
    autouvm::v1::GenerateRequest again;
    Check(again.ParseFromString(request.SerializeAsString()));  // every string was UTF-8
    static const autouvm::tokenizer::ByteTokenizer tokenizer(320, 256, 257);
    autouvm::server::ModelSettings settings;
    autouvm::server::Limits limits;
    auto params = autouvm::server::BuildGenerationParams(request, Model(), tokenizer, settings, limits, 1);
    if (params.ok()) {
      Check(!params->prompt.empty() && static_cast<int64_t>(params->prompt.size()) < Model().max_seq);
      for (int32_t id : params->prompt) Check(id >= 0 && id < Model().vocab_size);
      Check(params->max_tokens > 0);
    } else {
      Check(params.status().code() == absl::StatusCode::kInvalidArgument);
      Check(params.status().message().find(':') != std::string::npos);  // "<field>: <what>"
    }
  }
  autouvm::v1::ImportProfilesRequest import;
  autouvm::proto::LenientParse(bytes, &import);
  if (autouvm::proto::RequestDefect(import).empty()) {
    autouvm::v1::ImportProfilesRequest again;
    Check(again.ParseFromString(import.SerializeAsString()));
  }
  return 0;
}
