#include "server/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>  // mkdtemp

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace autouvm::server {
namespace {

namespace fs = std::filesystem;

absl::Status Precondition(const std::string& key, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat("server.tls.", key, ": ", what));
}

// The configured files' contents ("" for a CA file not configured).
struct Pem {
  std::string cert, key, ca;
  std::string Joined() const { return absl::StrCat(cert, std::string(1, '\0'), key, std::string(1, '\0'), ca); }
};

absl::StatusOr<std::string> ReadOne(const std::string& key, const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadTextFile(path, "the file");
  if (!text.ok()) return Precondition(key, std::string(text.status().message()));
  return text;
}

absl::StatusOr<Pem> ReadAll(const TlsSettings& tls) {
  Pem p;
  ASSIGN_OR_RETURN(p.cert, ReadOne("cert_file", tls.cert_file));
  ASSIGN_OR_RETURN(p.key, ReadOne("key_file", tls.key_file));
  if (!tls.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(p.ca, ReadOne("client_ca_file", tls.client_ca_file));
  }
  return p;
}

// The text must hold a PEM block of `kind` (CERTIFICATE, PRIVATE KEY).
absl::Status HasPem(const std::string& key, const std::string& path, const std::string& text, const std::string& kind) {
  if (absl::StrContains(text, "-----BEGIN ") && absl::StrContains(text, kind + "-----")) return absl::OkStatus();
  return Precondition(key, absl::StrCat(path, " holds no PEM ", absl::AsciiStrToLower(kind), " (-----BEGIN ",
                                        kind == "CERTIFICATE" ? kind : "... " + kind, "-----)"));
}

X509* FirstCertificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  return cert;
}

// When a certificate expires: as text for the log, and in seconds since the epoch for the metrics.
struct Expiry {
  std::string text;
  int64_t epoch_s = 0;
};

Expiry NotAfter(X509* cert) {
  Expiry e;
  const ASN1_TIME* t = X509_get0_notAfter(cert);
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio != nullptr && ASN1_TIME_print(bio, t) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    e.text.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) == 1) e.epoch_s = static_cast<int64_t>(timegm(&tm));
  return e;
}

// The set must parse and the key must be the first certificate's: gRPC would otherwise take them and
// fail every handshake. On success, when the certificate expires.
absl::StatusOr<Expiry> Validate(const TlsSettings& tls, const Pem& p) {
  RETURN_IF_ERROR(HasPem("cert_file", tls.cert_file, p.cert, "CERTIFICATE"));
  RETURN_IF_ERROR(HasPem("key_file", tls.key_file, p.key, "PRIVATE KEY"));
  if (!tls.client_ca_file.empty()) {
    RETURN_IF_ERROR(HasPem("client_ca_file", tls.client_ca_file, p.ca, "CERTIFICATE"));
    X509* ca = FirstCertificate(p.ca);
    X509_free(ca);
    if (ca == nullptr) return Precondition("client_ca_file", absl::StrCat(tls.client_ca_file, ": does not parse"));
  }
  X509* cert = FirstCertificate(p.cert);
  BIO* key_bio = BIO_new_mem_buf(p.key.data(), static_cast<int>(p.key.size()));
  EVP_PKEY* key = key_bio ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(key_bio);
  absl::StatusOr<Expiry> result;
  if (cert == nullptr) {
    result = Precondition("cert_file", absl::StrCat(tls.cert_file, ": its first certificate does not parse"));
  } else if (key == nullptr) {
    result = Precondition(
        "key_file", absl::StrCat(tls.key_file, ": the private key does not parse (encrypted keys are not supported)"));
  } else if (X509_check_private_key(cert, key) != 1) {
    result = Precondition("key_file",
                          absl::StrCat(tls.key_file, " is not the private key of the certificate in ", tls.cert_file));
  } else {
    result = NotAfter(cert);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return result;
}

absl::Status WritePrivate(const fs::path& path, const std::string& contents) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << contents;
    if (!out.flush()) return absl::InternalError(absl::StrCat("server.tls: cannot write ", path.string()));
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  return absl::OkStatus();
}

// Writes generation `n` of the copies and points `current` at it (a rename: the provider never sees a
// half-written set); removes the generation before the previous one.
absl::Status Install(const fs::path& dir, int n, const Pem& p) {
  const fs::path gen = dir / absl::StrCat("gen-", n);
  std::error_code ec;
  fs::create_directory(gen, ec);
  if (ec) return absl::InternalError(absl::StrCat("server.tls: cannot make ", gen.string(), ": ", ec.message()));
  RETURN_IF_ERROR(WritePrivate(gen / "tls.crt", p.cert));
  RETURN_IF_ERROR(WritePrivate(gen / "tls.key", p.key));
  RETURN_IF_ERROR(WritePrivate(gen / "ca.crt", p.ca));
  const fs::path link = dir / "current", tmp = dir / "current.tmp";
  fs::remove(tmp, ec);
  fs::create_directory_symlink(gen.filename(), tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) return absl::InternalError(absl::StrCat("server.tls: cannot switch ", link.string(), ": ", ec.message()));
  fs::remove_all(dir / absl::StrCat("gen-", n - 2), ec);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsFiles>> TlsFiles::Start(const TlsSettings& tls) {
  if (!tls.enabled()) return std::unique_ptr<TlsFiles>();
  ASSIGN_OR_RETURN(const Pem pem, ReadAll(tls));
  ASSIGN_OR_RETURN(const Expiry not_after, Validate(tls, pem));
  std::unique_ptr<TlsFiles> t(new TlsFiles(tls));
  t->state_.not_after_unix = not_after.epoch_s;
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / "autouvmd-tls-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {  // mode 0700: the copies hold the private key
    return absl::InternalError(
        absl::StrCat("server.tls: cannot make a private directory under ", base.string(), ": ", std::strerror(errno)));
  }
  t->dir_ = pattern;
  RETURN_IF_ERROR(Install(t->dir_, ++t->generation_, pem));
  t->last_contents_ = pem.Joined();
  // The provider reads the copies every second; only Install changes them.
  const fs::path current = fs::path(t->dir_) / "current";
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      (current / "tls.key").string(), (current / "tls.crt").string(),
      tls.client_ca_file.empty() ? "" : (current / "ca.crt").string(), /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca_file.empty()) options.watch_root_certs();
  options.set_cert_request_type(tls.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                : tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                             : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  t->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (t->credentials_ == nullptr) return absl::InternalError("server.tls: gRPC could not make TLS credentials");
  AUTOUVM_LOG(INFO) << "server.tls: certificate " << tls.cert_file << " valid until " << not_after.text
                    << "; the port serves checked copies in " << t->dir_;
  t->watcher_ = std::thread([self = t.get()] { self->Watch(); });
  return t;
}

TlsFiles::~TlsFiles() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

void TlsFiles::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(tls_.reload_interval_ms), [this] { return stop_; })) {
    lock.unlock();
    if (absl::Status s = Reload(); !s.ok()) {
      AUTOUVM_LOG(WARNING) << "server.tls: keeping the certificate in use: " << s.message();
    }
    lock.lock();
  }
}

absl::Status TlsFiles::Reload() {
  ASSIGN_OR_RETURN(const Pem pem, ReadAll(tls_));  // a file missing mid-rotation: tried again next time
  std::string joined = pem.Joined();
  if (joined == last_contents_) return absl::OkStatus();
  last_contents_ = std::move(joined);  // a bad set is reported once, not at every interval
  absl::StatusOr<Expiry> not_after = Validate(tls_, pem);
  absl::Status installed = not_after.ok() ? Install(dir_, generation_ + 1, pem) : not_after.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (!installed.ok()) {
    ++state_.refused;
    return installed;
  }
  ++generation_;
  ++state_.applied;
  state_.not_after_unix = not_after->epoch_s;
  AUTOUVM_LOG(INFO) << "server.tls: new certificate from " << tls_.cert_file << ", valid until " << not_after->text;
  return absl::OkStatus();
}

TlsFiles::State TlsFiles::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

std::string DescribeTls(const TlsSettings& tls) {
  if (!tls.enabled()) return "plaintext";
  std::string s =
      absl::StrCat("TLS (certificate ", tls.cert_file, ", read again every ", tls.reload_interval_ms / 1000, " s)");
  if (!tls.client_ca_file.empty()) {
    absl::StrAppend(&s, tls.require_client_cert ? "; client certificates required" : "; client certificates verified",
                    ", against ", tls.client_ca_file);
  }
  return s;
}

}  // namespace autouvm::server
