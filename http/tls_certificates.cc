#include "http/tls_certificates.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace autouvm::http {
namespace {

namespace fs = std::filesystem;

std::string OpensslError() {
  const unsigned long e = ERR_get_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return e == 0 ? "no PEM data" : buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsCertificates>> TlsCertificates::Load(HttpTls tls) {
  std::unique_ptr<TlsCertificates> c(new TlsCertificates(std::move(tls)));
  std::lock_guard<std::mutex> lock(c->mu_);
  if (absl::Status s = c->Refresh(); !s.ok()) return s;
  return c;
}

TlsCertificates::~TlsCertificates() { Free(); }

void TlsCertificates::Free() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
  sk_X509_pop_free(chain_, X509_free);
  cert_ = nullptr;
  key_ = nullptr;
  chain_ = nullptr;
}

absl::Status TlsCertificates::Refresh() {
  std::error_code ec;
  const fs::path dir(tls_.dir);
  const std::string target = fs::is_symlink(dir, ec) ? fs::read_symlink(dir, ec).string() : tls_.dir;
  if (!loaded_.empty() && target == loaded_) return absl::OkStatus();
  const std::string cert_path = (dir / "tls.crt").string(), key_path = (dir / "tls.key").string();
  BIO* cert_bio = BIO_new_file(cert_path.c_str(), "r");
  BIO* key_bio = BIO_new_file(key_path.c_str(), "r");
  X509* cert = cert_bio ? PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr) : nullptr;
  STACK_OF(X509)* chain = sk_X509_new_null();
  while (cert != nullptr) {
    X509* next = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
    if (next == nullptr) break;
    sk_X509_push(chain, next);
  }
  ERR_clear_error();  // the end of the chain reads as an error
  EVP_PKEY* key = key_bio ? PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(cert_bio);
  BIO_free(key_bio);
  if (cert == nullptr || key == nullptr || X509_check_private_key(cert, key) != 1) {
    const std::string why = OpensslError();
    X509_free(cert);
    EVP_PKEY_free(key);
    sk_X509_pop_free(chain, X509_free);
    return absl::FailedPreconditionError(
        absl::StrCat("server.tls: the HTTP port cannot load ", cert == nullptr ? cert_path : key_path, ": ", why));
  }
  Free();
  cert_ = cert;
  key_ = key;
  chain_ = chain;
  if (!loaded_.empty()) AUTOUVM_LOG(INFO) << "the HTTP port serves the rotated certificate (" << target << ")";
  loaded_ = target;
  return absl::OkStatus();
}

int TlsCertificates::OnCertificate(SSL* ssl, void* self) {
  auto* c = static_cast<TlsCertificates*>(self);
  std::lock_guard<std::mutex> lock(c->mu_);
  if (absl::Status s = c->Refresh(); !s.ok()) {
    // TlsFiles only installs checked sets: a failure here is a rotation caught mid-swap; the last
    // generation loaded goes on serving, and the next handshake tries again.
    AUTOUVM_LOG(WARNING) << s.message() << "; serving the certificate loaded before";
  }
  if (SSL_use_certificate(ssl, c->cert_) != 1 || SSL_use_PrivateKey(ssl, c->key_) != 1 ||
      SSL_set1_chain(ssl, c->chain_) != 1) {
    return 0;
  }
  return 1;
}

bool TlsCertificates::Setup(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_cert_cb(ctx, &TlsCertificates::OnCertificate, this);
  if (tls_.client_ca) {
    const std::string ca = (fs::path(tls_.dir) / "ca.crt").string();
    if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) return false;
    SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(ca.c_str()));
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (tls_.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                       nullptr);
  }
  return true;
}

}  // namespace autouvm::http
