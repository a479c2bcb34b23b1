#include "profiler/profile_key.h"

#include <openssl/evp.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "profiler/profile_store.h"

namespace autouvm::profiler {
namespace {

using autouvm::v1::Phase;
using autouvm::v1::ProfileKey;

// Key parts are joined by '/': a part must not contain one (GPU and policy names never do; checked).
bool Clean(std::string_view part) { return !part.empty() && part.find('/') == std::string_view::npos; }

struct DigestContext {
  DigestContext() : ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
  void Update(const void* data, size_t n) { EVP_DigestUpdate(ctx.get(), data, n); }
  std::string Final() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), out, &len);
    return std::string(reinterpret_cast<char*>(out), len);
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx;
};

ProfileKey Key(std::string digest, Phase phase, int32_t batch, int32_t bucket, std::string gpu, int64_t budget,
               std::string policy) {
  ProfileKey k;
  k.set_model_digest(std::move(digest));
  k.set_phase(phase);
  k.set_batch(batch);
  k.set_prompt_bucket(bucket);
  k.set_gpu(std::move(gpu));
  k.set_device_budget_bytes(budget);
  k.set_policy(std::move(policy));
  k.set_schema_version(kProfileStoreSchemaVersion);
  return k;
}

}  // namespace

int32_t PromptBucket(int64_t prompt_len) {
  int64_t b = 1;
  while (b < prompt_len && b < (int64_t{1} << 30)) b <<= 1;
  return static_cast<int32_t>(b);
}

ProfileKey PrefillKey(std::string model_digest, int32_t batch, int64_t prompt_len, std::string gpu,
                      int64_t device_budget_bytes, std::string policy) {
  return Key(std::move(model_digest), v1::PHASE_PREFILL, PromptBucket(batch), PromptBucket(prompt_len), std::move(gpu),
             device_budget_bytes, std::move(policy));
}

ProfileKey DecodeKey(std::string model_digest, int32_t batch, std::string gpu, int64_t device_budget_bytes,
                     std::string policy) {
  return Key(std::move(model_digest), v1::PHASE_DECODE, PromptBucket(batch), 0, std::move(gpu), device_budget_bytes,
             std::move(policy));
}

ProfileKey MixedKey(std::string model_digest, int32_t rows, int64_t prompt_len, std::string gpu,
                    int64_t device_budget_bytes, std::string policy) {
  return Key(std::move(model_digest), v1::PHASE_MIXED, PromptBucket(rows), PromptBucket(prompt_len), std::move(gpu),
             device_budget_bytes, std::move(policy));
}

const char* PhaseName(autouvm::v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_PREFILL:
      return "prefill";
    case v1::PHASE_DECODE:
      return "decode";
    case v1::PHASE_MIXED:
      return "mixed";
    default:
      return "unspecified";
  }
}

std::string KeyPrefix(int32_t schema_version, std::string_view model_digest) {
  return absl::StrCat("v", schema_version, "/", std::string(model_digest), "/");
}

std::string EncodeKey(const ProfileKey& k) {
  return absl::StrCat(KeyPrefix(k.schema_version(), k.model_digest()), PhaseName(k.phase()), "/b", k.batch(), "/p",
                      k.prompt_bucket(), "/", k.gpu(), "/", k.device_budget_bytes(), "/", k.policy());
}

absl::StatusOr<ProfileKey> ParseKey(std::string_view encoded) {
  const std::vector<std::string> parts = absl::StrSplit(std::string(encoded), '/');
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("profile key \"", std::string(encoded), "\": ", what));
  };
  if (parts.size() != 8) return bad("expected 8 parts separated by '/'");
  int32_t schema = 0, batch = 0, bucket = 0;
  int64_t budget = 0;
  if (parts[0].size() < 2 || parts[0][0] != 'v' || !absl::SimpleAtoi(parts[0].substr(1), &schema)) {
    return bad("schema version");
  }
  if (parts[1].size() != 64) return bad("model digest");
  Phase phase = v1::PHASE_UNSPECIFIED;
  if (parts[2] == "prefill") phase = v1::PHASE_PREFILL;
  if (parts[2] == "decode") phase = v1::PHASE_DECODE;
  if (parts[2] == "mixed") phase = v1::PHASE_MIXED;
  if (phase == v1::PHASE_UNSPECIFIED) return bad("phase");
  if (parts[3].size() < 2 || parts[3][0] != 'b' || !absl::SimpleAtoi(parts[3].substr(1), &batch) || batch < 1) {
    return bad("batch");
  }
  if (parts[4].size() < 2 || parts[4][0] != 'p' || !absl::SimpleAtoi(parts[4].substr(1), &bucket) || bucket < 0) {
    return bad("prompt bucket");
  }
  if (!Clean(parts[5])) return bad("GPU");
  if (!absl::SimpleAtoi(parts[6], &budget) || budget < 0) return bad("device budget");
  if (!Clean(parts[7])) return bad("policy");
  ProfileKey k = Key(parts[1], phase, batch, bucket, parts[5], budget, parts[7]);
  k.set_schema_version(schema);
  return k;
}

std::string Sha256(std::string_view bytes) {
  DigestContext d;
  d.Update(bytes.data(), bytes.size());
  return d.Final();
}

absl::StatusOr<std::string> ModelDigest(const std::string& model_pt, std::string_view model_yaml_text) {
  DigestContext d;
  std::vector<char> buffer(1 << 20);
  std::ifstream in(model_pt, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(model_pt, ": cannot read it to digest the model"));
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    d.Update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return absl::UnavailableError(absl::StrCat(model_pt, ": read error while digesting"));
  d.Update(model_yaml_text.data(), model_yaml_text.size());
  return absl::BytesToHexString(d.Final());
}

absl::StatusOr<std::string> ModelDigest(const std::string& entry_dir) {
  const std::string yaml = entry_dir + "/model.yaml";
  std::ifstream in(yaml, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(yaml, ": cannot read it to digest the model"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ModelDigest(entry_dir + "/model.pt", text);
}

}  // namespace autouvm::profiler
