// End-to-end: TLS and mutual TLS on the daemon's gRPC port (server.tls), certificates made for each test
// with the openssl command line; the daemon's channel, other clients' channels and autouvm-cli.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/prometheus_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

// Certificate authorities and the certificates they sign, as PEM files in a temporary directory.
class Pki {
 public:
  std::string Path(const std::string& file) const { return dir_.Sub(file); }
  std::string Pem(const std::string& file) const { return ReadFile(Path(file)); }

  // <name>-ca.pem and <name>-ca.key: a self-signed CA.
  void MakeCa(const std::string& name) {
    Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             Path(name + "-ca.key"), "-out", Path(name + "-ca.pem"), "-days", "2", "-subj",
             "/CN=" + name + " test CA"});
  }
  // <name>.pem and <name>.key, signed by the CA `ca`: a server certificate for 127.0.0.1 and localhost,
  // or a client certificate.
  void MakeLeaf(const std::string& ca, const std::string& name, bool server) {
    Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             Path(name + ".key"), "-out", Path(name + ".csr"), "-subj", "/CN=" + name});
    std::ofstream(Path(name + ".ext")) << (server ? "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                                    "extendedKeyUsage=serverAuth\n"
                                                  : "extendedKeyUsage=clientAuth\n");
    Openssl({"x509", "-req", "-in", Path(name + ".csr"), "-CA", Path(ca + "-ca.pem"), "-CAkey", Path(ca + "-ca.key"),
             "-CAcreateserial", "-out", Path(name + ".pem"), "-days", "2", "-extfile", Path(name + ".ext")});
  }

 private:
  void Openssl(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    std::string out, err;
    const int code = RunCommand(args, &out, &err);
    ASSERT_EQ(code, 0) << "openssl " << args[1] << ": " << err;
  }

  TempDir dir_;
};

// TLS credentials trusting `ca_pem`, with a client certificate when `cert_pem` is set.
std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& ca_pem, const std::string& cert_pem = "",
                                              const std::string& key_pem = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem;
  o.pem_cert_chain = cert_pem;
  o.pem_private_key = key_pem;
  return grpc::SslCredentials(o);
}

// One health check on a channel of its own (no connection shared with other channels).
grpc::Status CheckHealth(const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (s.ok() && resp.status() != HealthCheckResponse::SERVING) {
    return grpc::Status(grpc::StatusCode::UNKNOWN, "health: not SERVING");
  }
  return s;
}

std::string TlsConfig(const Pki& pki, const std::string& extra = "") {
  return "server:\n  tls:\n    cert_file: " + pki.Path("server.pem") + "\n    key_file: " + pki.Path("server.key") +
         "\n" + extra;
}

TEST(TlsE2E, ServesOnlyClientsThatTrustItsCertificate) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeCa("b");
  pki.MakeLeaf("a", "server", /*server=*/true);
  DaemonProcess d({.config_yaml = TlsConfig(pki), .credentials = Tls(pki.Pem("a-ca.pem"))});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_NE(d.Log().find("TLS (certificate " + pki.Path("server.pem")), std::string::npos) << d.Log();
  autouvm::v1::GenerateResponse response;
  const grpc::Status generated = CallGenerate(d, GreedyRequest("tiny-llama", "hello", 4), &response);
  ASSERT_TRUE(generated.ok()) << generated.error_message();
  EXPECT_EQ(response.usage().completion_tokens(), 4u);

  EXPECT_TRUE(CheckHealth(d.address(), Tls(pki.Pem("a-ca.pem"))).ok());
  EXPECT_FALSE(CheckHealth(d.address(), grpc::InsecureChannelCredentials()).ok()) << "plaintext was served";
  EXPECT_FALSE(CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok()) << "a client trusting another CA got in";

  // The checked copies the port serves (Note [Validated certificate rotation]) hold the private key: only
  // the daemon's user may read them, and they go when the daemon exits.
  const std::string marker = "the port serves checked copies in ";
  const std::string log = d.Log();
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const std::string copies = log.substr(at + marker.size(), log.find('\n', at) - at - marker.size());
  const auto perms = std::filesystem::status(copies).permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none)
      << copies;
  EXPECT_EQ(std::filesystem::status(copies + "/current/tls.key").permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(), 0) << d.Log();
  EXPECT_FALSE(std::filesystem::exists(copies)) << copies << " outlived the daemon";
}

TEST(TlsE2E, MutualTlsAdmitsOnlyClientsWithACertificateFromItsCa) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeCa("b");
  pki.MakeLeaf("a", "server", /*server=*/true);
  pki.MakeLeaf("a", "client", /*server=*/false);
  pki.MakeLeaf("b", "stranger", /*server=*/false);
  const std::string ca = pki.Pem("a-ca.pem");
  DaemonProcess d({.config_yaml = TlsConfig(
                       pki, "    client_ca_file: " + pki.Path("a-ca.pem") + "\n    require_client_cert: true\n"),
                   .credentials = Tls(ca, pki.Pem("client.pem"), pki.Pem("client.key"))});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  EXPECT_NE(d.Log().find("client certificates required"), std::string::npos) << d.Log();

  EXPECT_TRUE(CheckHealth(d.address(), Tls(ca, pki.Pem("client.pem"), pki.Pem("client.key"))).ok());
  EXPECT_FALSE(CheckHealth(d.address(), Tls(ca)).ok()) << "a client without a certificate got in";
  EXPECT_FALSE(CheckHealth(d.address(), Tls(ca, pki.Pem("stranger.pem"), pki.Pem("stranger.key"))).ok())
      << "a client whose certificate another CA signed got in";
}

// Note [Validated certificate rotation]: a renewed certificate is served to new connections without a
// restart; a rotation to files that are broken — garbage, a key that is not the certificate's — is
// refused with the key and the file named in the log, and the last good pair goes on serving.
TEST(TlsE2E, ARotatedCertificateIsServedWithoutARestartAndABrokenOneIsRefused) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeCa("b");
  pki.MakeLeaf("a", "server", /*server=*/true);
  pki.MakeLeaf("b", "server-b", /*server=*/true);
  pki.MakeLeaf("b", "server-c", /*server=*/true);
  DaemonProcess d(
      {.config_yaml = TlsConfig(pki, "    reload_interval: 1s\n"), .credentials = Tls(pki.Pem("a-ca.pem"))});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  ASSERT_FALSE(CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok());

  // As a Kubernetes Secret is updated: the new files replace the old ones by rename.
  std::filesystem::rename(pki.Path("server-b.key"), pki.Path("server.key"));
  std::filesystem::rename(pki.Path("server-b.pem"), pki.Path("server.pem"));
  EXPECT_TRUE(Eventually([&] { return CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok(); }, 30)) << d.Log();
  EXPECT_FALSE(CheckHealth(d.address(), Tls(pki.Pem("a-ca.pem"))).ok()) << "the old certificate is still served";
  EXPECT_TRUE(Eventually([&] { return d.Log().find("server.tls: new certificate from") != std::string::npos; }))
      << d.Log();

  // Garbage in place of the certificate: refused, named; the pair in use goes on serving.
  std::ofstream(pki.Path("server.pem")) << "garbage\n";
  EXPECT_TRUE(Eventually([&] {
    return d.Log().find("keeping the certificate in use: server.tls.cert_file: " + pki.Path("server.pem") +
                        " holds no PEM certificate") != std::string::npos;
  })) << d.Log();
  EXPECT_TRUE(CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok()) << "a garbage certificate was taken";
  // Another certificate with the old key: refused, named.
  std::filesystem::rename(pki.Path("server-c.pem"), pki.Path("server.pem"));
  EXPECT_TRUE(Eventually([&] {
    return d.Log().find("keeping the certificate in use: server.tls.key_file: " + pki.Path("server.key") +
                        " is not the private key of the certificate in " + pki.Path("server.pem")) != std::string::npos;
  })) << d.Log();
  EXPECT_TRUE(CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok()) << "a mismatched pair was taken";
  // Its own key follows: the pair is whole again and is taken.
  std::filesystem::rename(pki.Path("server-c.key"), pki.Path("server.key"));
  EXPECT_TRUE(Eventually(
      [&] {
        const std::string log = d.Log();
        size_t n = 0;
        for (size_t at = log.find("new certificate from"); at != std::string::npos;
             at = log.find("new certificate from", at + 1)) {
          ++n;
        }
        return n >= 2;
      },
      30))
      << d.Log();
  EXPECT_TRUE(CheckHealth(d.address(), Tls(pki.Pem("b-ca.pem"))).ok());

  // What became of the rotations, as a real Prometheus sees it: two new sets taken; the garbage and the
  // mismatched pair refused (a set read halfway through a rename or a write is refused too: at least
  // two); and when the certificate served now, made for two days, expires.
  autouvm::v1::ServerStatus status;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.admin()->GetServerStatus(&ctx, {}, &status).ok());
  }
  PrometheusProcess prom(status.metrics_address());
  ASSERT_TRUE(Eventually([&] { return prom.Ready(); })) << prom.Log();
  EXPECT_TRUE(
      Eventually([&] { return prom.Sum("autouvm_tls_certificate_reloads_total{result=\"applied\"}") >= 0; }, 30))
      << prom.Log();
  EXPECT_EQ(prom.Sum("autouvm_tls_certificate_reloads_total{result=\"applied\"}"), 2);
  EXPECT_GE(prom.Sum("autouvm_tls_certificate_reloads_total{result=\"refused\"}"), 2);
  const double expiry = prom.Sum("autouvm_tls_certificate_expiry_timestamp_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(expiry, now + 1.9 * 86400);
  EXPECT_LT(expiry, now + 2 * 86400 + 600);
}

// curl to the OpenAI API's port: the exit code (0: the TLS handshake and the request went through).
int CurlHttps(const DaemonProcess& d, const std::string& ca, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {
      "/usr/bin/curl", "-sS",      "-o", "/dev/null",
      "--fail",        "--cacert", ca,   "https://127.0.0.1:" + std::to_string(d.http_port()) + "/v1/models"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::string out, err;
  return RunCommand(argv, &out, &err, 30);
}

TEST(TlsE2E, TheHttpPortServesTheSameCertificateAndItsRotations) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeCa("b");
  pki.MakeLeaf("a", "server", /*server=*/true);
  pki.MakeLeaf("b", "server-b", /*server=*/true);
  pki.MakeLeaf("a", "client", /*server=*/false);
  DaemonProcess d({.config_yaml = TlsConfig(pki, "    reload_interval: 1s\n    client_ca_file: " +
                                                     pki.Path("a-ca.pem") + "\n    require_client_cert: true\n"),
                   .credentials = Tls(pki.Pem("a-ca.pem"), pki.Pem("client.pem"), pki.Pem("client.key"))});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  ASSERT_GT(d.http_port(), 0);
  const std::vector<std::string> client = {"--cert", pki.Path("client.pem"), "--key", pki.Path("client.key")};
  EXPECT_EQ(CurlHttps(d, pki.Path("a-ca.pem"), client), 0) << d.Log();
  EXPECT_NE(CurlHttps(d, pki.Path("b-ca.pem"), client), 0) << "a client trusting another CA got in";
  std::string out, err;
  EXPECT_NE(RunCommand({"/usr/bin/curl", "-sS", "--fail", "-o", "/dev/null",
                        "http://127.0.0.1:" + std::to_string(d.http_port()) + "/v1/models"},
                       &out, &err, 30),
            0)
      << "plaintext was served";
  // Mutual TLS on the HTTP port too: without a client certificate the request fails.
  EXPECT_NE(CurlHttps(d, pki.Path("a-ca.pem")), 0) << "a client without a certificate got in";

  std::filesystem::rename(pki.Path("server-b.key"), pki.Path("server.key"));
  std::filesystem::rename(pki.Path("server-b.pem"), pki.Path("server.pem"));
  EXPECT_TRUE(Eventually([&] { return CurlHttps(d, pki.Path("b-ca.pem"), client) == 0; }, 30)) << d.Log();
  EXPECT_NE(CurlHttps(d, pki.Path("a-ca.pem"), client), 0) << "the old certificate is still served";
  EXPECT_NE(d.Log().find("the HTTP port serves the rotated certificate"), std::string::npos) << d.Log();
}

// Each bad setting stops the daemon at start with a message naming it; nothing is served in plaintext.
TEST(TlsE2E, BadTlsSettingsStopTheDaemonNamingTheSetting) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeLeaf("a", "server", /*server=*/true);
  pki.MakeLeaf("a", "other", /*server=*/true);
  std::ofstream(pki.Path("garbage.pem")) << "not a certificate\n";
  // Exit 2: the config itself is wrong; 1: the daemon cannot start with it.
  struct Case {
    std::string what, yaml, expected;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {"missing certificate file",
       "server:\n  tls: {cert_file: " + pki.Path("absent.pem") + ", key_file: " + pki.Path("server.key") + "}\n",
       "server.tls.cert_file:", 1},
      {"certificate file without a certificate",
       "server:\n  tls: {cert_file: " + pki.Path("garbage.pem") + ", key_file: " + pki.Path("server.key") + "}\n",
       "server.tls.cert_file: " + pki.Path("garbage.pem") + " holds no PEM certificate", 1},
      {"key of another certificate",
       "server:\n  tls: {cert_file: " + pki.Path("server.pem") + ", key_file: " + pki.Path("other.key") + "}\n",
       "server.tls.key_file: " + pki.Path("other.key") + " is not the private key of the certificate", 1},
      {"key without certificate", "server:\n  tls: {key_file: " + pki.Path("server.key") + "}\n",
       "server.tls.cert_file: missing", 2},
      {"client CA that is not a certificate",
       "server:\n  tls: {cert_file: " + pki.Path("server.pem") + ", key_file: " + pki.Path("server.key") +
           ", client_ca_file: " + pki.Path("garbage.pem") + "}\n",
       "server.tls.client_ca_file:", 1},
      {"required client certificates without a CA",
       "server:\n  tls: {cert_file: " + pki.Path("server.pem") + ", key_file: " + pki.Path("server.key") +
           ", require_client_cert: true}\n",
       "server.tls.require_client_cert: needs client_ca_file", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    DaemonProcess d({.config_yaml = c.yaml});
    EXPECT_FALSE(d.Start()) << "started with " << c.yaml;
    EXPECT_EQ(d.Wait(), c.exit_code);
    EXPECT_NE(d.Log().find(c.expected), std::string::npos) << d.Log();
  }
}

TEST(TlsE2E, TheCliConnectsOverTlsAndSaysWhatIsWrongWithItsFlags) {
  Pki pki;
  pki.MakeCa("a");
  pki.MakeLeaf("a", "server", /*server=*/true);
  pki.MakeLeaf("a", "client", /*server=*/false);
  DaemonProcess d({.config_yaml = TlsConfig(pki, "    client_ca_file: " + pki.Path("a-ca.pem") + "\n"),
                   .credentials = Tls(pki.Pem("a-ca.pem"))});
  ASSERT_TRUE(d.Start()) << d.Log();
  ASSERT_TRUE(d.WaitForHealth(HealthCheckResponse::SERVING)) << d.Log();
  auto cli = [&](std::vector<std::string> args, std::string* out, std::string* err) {
    args.insert(args.begin(), {AUTOUVM_CLI_PATH, "--addr", d.address(), "--timeout", "5"});
    return RunCommand(args, out, err);
  };
  std::string out, err;
  EXPECT_EQ(cli({"--tls-ca", pki.Path("a-ca.pem"), "health"}, &out, &err), 0) << err;
  EXPECT_EQ(out, "SERVING\n");
  // Client certificates are asked for (client_ca_file) but not required: one signed by the CA is taken.
  EXPECT_EQ(cli({"--tls-ca", pki.Path("a-ca.pem"), "--tls-cert", pki.Path("client.pem"), "--tls-key",
                 pki.Path("client.key"), "health"},
                &out, &err),
            0)
      << err;
  // By name: the certificate's DNS name, checked instead of the address's.
  EXPECT_EQ(cli({"--tls-ca", pki.Path("a-ca.pem"), "--tls-server-name", "localhost", "health"}, &out, &err), 0) << err;
  EXPECT_EQ(cli({"--tls-ca", pki.Path("a-ca.pem"), "--tls-server-name", "elsewhere.example", "health"}, &out, &err), 1);
  EXPECT_EQ(cli({"health"}, &out, &err), 1) << "plaintext was served";

  EXPECT_EQ(cli({"--tls-cert", pki.Path("client.pem"), "health"}, &out, &err), 2);
  EXPECT_NE(err.find("--tls-cert: needs --tls-key"), std::string::npos) << err;
  EXPECT_EQ(cli({"--tls-ca", pki.Path("absent.pem"), "health"}, &out, &err), 2);
  EXPECT_NE(err.find("--tls-ca:"), std::string::npos) << err;
  EXPECT_EQ(cli({"--tls-ca", pki.Path("client.key"), "health"}, &out, &err), 2);
  EXPECT_NE(err.find("--tls-ca: " + pki.Path("client.key") + " holds no PEM CERTIFICATE block"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace autouvm::testing
