// End-to-end: autouvm-cli's admin commands against the real daemon — `server`, `profiles
// list|show|delete|export|import`, `reprofile`, and the admin token (--token-file, AUTOUVM_ADMIN_TOKEN).
//
// Usage (tests/e2e/): the test starts autouvmd and runs autouvm-cli from the build tree, each daemon on
// 127.0.0.1 port 0 with its own temporary model repository and state dir:
//   ninja -C build cli_profiles_e2e_test && build/tests/cli_profiles_e2e_test
//   ctest --test-dir build -L cli_profiles_e2e_test
// Profiles are analysed on the daemon's background thread, so tests that need a stored profile poll
// ListProfiles (bounded) rather than sleep.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int Cli(const DaemonProcess& d, std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), {AUTOUVM_CLI_PATH, "--addr", d.address()});
  return RunCommand(args, out, err);
}

// One short request, so the daemon sees (and profiles) a prefill and a decode shape of tiny-llama.
void GenerateOnce(const DaemonProcess& d) {
  std::string out, err;
  ASSERT_EQ(Cli(d,
                {"generate", "--model", "tiny-llama", "--prompt", "Hello there", "--max-tokens", "4", "--ignore-eos",
                 "--temperature", "0"},
                &out, &err),
            0)
      << err;
}

// Polls ListProfiles until tiny-llama has at least two profiles and all are stored and READY (bounded:
// analysis runs on the daemon's background thread and has no push). For daemons without an admin token.
bool WaitForStoredProfiles(const DaemonProcess& d) {
  for (int i = 0; i < 3000; ++i) {
    grpc::ClientContext ctx;
    autouvm::v1::ListProfilesRequest req;
    req.set_model("tiny-llama");
    autouvm::v1::ListProfilesResponse resp;
    if (d.admin()->ListProfiles(&ctx, req, &resp).ok() && resp.profiles_size() >= 2 &&
        std::all_of(resp.profiles().begin(), resp.profiles().end(),
                    [](const auto& p) { return p.stored() && p.state() == autouvm::v1::PROFILE_STATE_READY; })) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The rows of a `profiles list` / `reprofile` table, split on whitespace, without the header.
std::vector<std::vector<std::string>> TableRows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  std::string line;
  for (bool header = true; std::getline(lines, line); header = false) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string word; words >> word;) row.push_back(word);
    if (!header) rows.push_back(row);
  }
  return rows;
}

// The row of `model` in `phase` (columns MODEL PHASE BATCH PROMPT GPU POLICY STATE ... KEY), or {}.
std::vector<std::string> FindRow(const std::string& out, const std::string& model, const std::string& phase) {
  for (const auto& row : TableRows(out)) {
    if (row.size() == 12 && row[0] == model && row[1] == phase) return row;
  }
  return {};
}

// A daemon shared by the tests that only read: one request served, its profiles stored.
class CliProfilesE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new DaemonProcess();
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    ASSERT_TRUE(daemon_->WaitForHealth(HealthCheckResponse::SERVING)) << daemon_->Log();
    GenerateOnce(*daemon_);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
  }
  static DaemonProcess* daemon_;
};

DaemonProcess* CliProfilesE2E::daemon_ = nullptr;

TEST_F(CliProfilesE2E, ServerPrintsTheProfileStore) {
  std::string out, err;
  ASSERT_EQ(Cli(*daemon_, {"server"}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "\nprofile_store: rocksdb " + daemon_->state_dir())) << out;
  EXPECT_TRUE(Contains(out, "\nadmin_auth: false\n")) << out;
  EXPECT_EQ(out.rfind("version: ", 0), 0u) << out;
  ASSERT_EQ(Cli(*daemon_, {"server", "--json"}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "\"profileStore\":\"rocksdb ")) << out;
}

TEST_F(CliProfilesE2E, ListShowsAPrefillAndADecodeRowAfterOneRequest) {
  std::string out, err;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "list", "tiny-llama"}, &out, &err), 0) << err;
  EXPECT_EQ(out.rfind("MODEL ", 0), 0u) << out;
  const auto decode = FindRow(out, "tiny-llama", "decode");
  const auto prefill = FindRow(out, "tiny-llama", "prefill");
  ASSERT_FALSE(decode.empty()) << out;
  ASSERT_FALSE(prefill.empty()) << out;
  EXPECT_EQ(decode[2], "1") << out;                      // one request: batch 1
  EXPECT_EQ(decode[3], "-") << out;                      // decode has no prompt bucket
  EXPECT_NE(prefill[3], "-") << out;                     // prefill has one
  EXPECT_TRUE(Contains(decode[11], "/decode/")) << out;  // the store key

  ASSERT_EQ(Cli(*daemon_, {"profiles", "list", "--json"}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "\"PHASE_DECODE\"")) << out;
  EXPECT_TRUE(Contains(out, "\"PHASE_PREFILL\"")) << out;
}

TEST_F(CliProfilesE2E, ShowFindsAProfileByShapeAndByKey) {
  ASSERT_TRUE(WaitForStoredProfiles(*daemon_)) << daemon_->Log();
  std::string by_shape, err;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "show", "tiny-llama", "--phase", "decode", "--batch", "1"}, &by_shape, &err), 0)
      << err;
  EXPECT_TRUE(Contains(by_shape, "\nphase: decode\n")) << by_shape;
  EXPECT_TRUE(Contains(by_shape, "\nstate: READY\n")) << by_shape;
  EXPECT_TRUE(Contains(by_shape, "\nstored: true\n")) << by_shape;
  EXPECT_TRUE(Contains(by_shape, "\nremote_bytes: 0\n")) << by_shape;  // the tiny model fits its budget
  EXPECT_TRUE(Contains(by_shape, "\nhistory: ")) << by_shape;

  std::string list;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "list", "tiny-llama"}, &list, &err), 0) << err;
  const auto decode = FindRow(list, "tiny-llama", "decode");
  ASSERT_FALSE(decode.empty()) << list;
  std::string by_key;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "show", "tiny-llama", "--key", decode[11]}, &by_key, &err), 0) << err;
  EXPECT_TRUE(Contains(by_key, "\nkey: " + decode[11] + "\n")) << by_key;

  std::string full;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "show", "tiny-llama", "--key", decode[11], "--full", "--json"}, &full, &err), 0)
      << err;
  EXPECT_TRUE(Contains(full, "\"profile\":{")) << full.substr(0, 2000);
  EXPECT_TRUE(Contains(full, "\"plan\":{")) << full.substr(0, 2000);
}

TEST_F(CliProfilesE2E, ExportThenImportIntoAnotherDaemon) {
  ASSERT_TRUE(WaitForStoredProfiles(*daemon_)) << daemon_->Log();
  TempDir files;
  const std::string bundle = files.Sub("tiny.bundle");
  std::string out, err;
  ASSERT_EQ(Cli(*daemon_, {"profiles", "export", "tiny-llama", "-o", bundle}, &out, &err), 0) << err;
  int exported = 0;
  ASSERT_EQ(std::sscanf(out.c_str(), "exported %d ", &exported), 1) << out;
  EXPECT_GE(exported, 2) << out;
  EXPECT_TRUE(std::filesystem::is_regular_file(bundle));
  EXPECT_FALSE(std::filesystem::exists(bundle + ".tmp"));

  // The same model files (so the same digest), but an empty profile store.
  // Profiled on demand: the imported profiles are checked at its first request, not at load.
  DaemonProcess other({.config_yaml = "model_defaults: {plan_at_load: false}\n", .generate_default_model = false});
  std::filesystem::create_directories(other.repository());
  std::filesystem::copy(daemon_->repository(), other.repository(), std::filesystem::copy_options::recursive);
  ASSERT_TRUE(other.Start()) << other.Log();
  ASSERT_TRUE(other.WaitForHealth(HealthCheckResponse::SERVING)) << other.Log();

  ASSERT_EQ(Cli(other, {"profiles", "import", bundle}, &out, &err), 0) << out << err;
  int imported = -1, skipped = -1, errors = -1;
  ASSERT_EQ(std::sscanf(out.c_str(), "imported: %d\nskipped: %d\nerrors: %d", &imported, &skipped, &errors), 3) << out;
  EXPECT_GE(imported, 1) << out;
  EXPECT_EQ(errors, 0) << out << err;

  // Again, without --overwrite: everything is already there.
  ASSERT_EQ(Cli(other, {"profiles", "import", bundle, "--json"}, &out, &err), 0) << out << err;
  EXPECT_TRUE(Contains(out, "\"imported\":0")) << out;

  ASSERT_EQ(Cli(other, {"profiles", "list", "tiny-llama", "--json"}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "\"stored\":true")) << out;
}

TEST_F(CliProfilesE2E, ImportRefusesAFileThatIsNotABundle) {
  TempDir files;
  std::ofstream(files.Sub("notes.txt")) << "not a bundle\n";
  std::string out, err;
  EXPECT_EQ(Cli(*daemon_, {"profiles", "import", files.Sub("notes.txt")}, &out, &err), 1);
  EXPECT_TRUE(Contains(err, "is not a ProfileBundle")) << err;
  EXPECT_EQ(Cli(*daemon_, {"profiles", "import", files.Sub("missing.bundle")}, &out, &err), 2);
  EXPECT_TRUE(Contains(err, "missing.bundle")) << err;
}

// Tests that change profiles get a daemon of their own.
class CliProfileChangesE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start()) << daemon_.Log();
    ASSERT_TRUE(daemon_.WaitForHealth(HealthCheckResponse::SERVING)) << daemon_.Log();
    GenerateOnce(daemon_);
    ASSERT_TRUE(WaitForStoredProfiles(daemon_)) << daemon_.Log();
  }
  DaemonProcess daemon_;
};

TEST_F(CliProfileChangesE2E, DeleteRemovesTheStoredProfileOnce) {
  std::string out, err;
  ASSERT_EQ(Cli(daemon_, {"profiles", "delete", "tiny-llama", "--phase", "decode", "--batch", "1"}, &out, &err), 0)
      << err;
  EXPECT_EQ(out.rfind("deleted: true\nkey: v1/", 0), 0u) << out;
  EXPECT_NE(out.find("/decode/b1/p0/"), std::string::npos) << out;
  ASSERT_EQ(Cli(daemon_, {"profiles", "delete", "tiny-llama", "--phase", "decode", "--batch", "1"}, &out, &err), 0)
      << err;
  EXPECT_EQ(out.rfind("deleted: false\nkey: v1/", 0), 0u) << out;
}

TEST_F(CliProfileChangesE2E, ReprofileMarksProfilesStale) {
  std::string out, err;
  ASSERT_EQ(Cli(daemon_, {"reprofile", "tiny-llama", "--phase", "decode", "--batch", "1", "--json"}, &out, &err), 0)
      << err;
  EXPECT_TRUE(Contains(out, "\"PHASE_DECODE\"")) << out;
  EXPECT_FALSE(Contains(out, "\"PHASE_PREFILL\"")) << out;

  ASSERT_EQ(Cli(daemon_, {"reprofile", "tiny-llama"}, &out, &err), 0) << err;
  const auto prefill = FindRow(out, "tiny-llama", "prefill");
  ASSERT_FALSE(prefill.empty()) << out;
  EXPECT_EQ(prefill[6], "STALE") << out;

  EXPECT_EQ(Cli(daemon_, {"reprofile", "nope"}, &out, &err), 1);
  EXPECT_EQ(err.rfind("error: NOT_FOUND: ", 0), 0u) << err;
}

// A daemon with an admin token: every Admin call needs `authorization: Bearer <token>`.
class CliAdminTokenE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    files_ = new TempDir();
    std::ofstream(files_->Sub("daemon.token")) << kToken;         // the daemon's copy, exactly the token
    std::ofstream(files_->Sub("right.token")) << kToken << "\n";  // the CLI strips the newline
    std::ofstream(files_->Sub("wrong.token")) << "not-the-token\n";
    daemon_ = new DaemonProcess({.config_yaml = "admin: {token_file: \"" + files_->Sub("daemon.token") + "\"}\n"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
    ASSERT_TRUE(daemon_->WaitForHealth(HealthCheckResponse::SERVING)) << daemon_->Log();
  }
  static void TearDownTestSuite() {
    delete daemon_;
    daemon_ = nullptr;
    delete files_;
    files_ = nullptr;
  }
  static constexpr char kToken[] = "s3cret-token";
  static TempDir* files_;
  static DaemonProcess* daemon_;
};

TempDir* CliAdminTokenE2E::files_ = nullptr;
DaemonProcess* CliAdminTokenE2E::daemon_ = nullptr;

TEST_F(CliAdminTokenE2E, WithoutATokenAdminCallsAreUnauthenticated) {
  std::string out, err;
  EXPECT_EQ(Cli(*daemon_, {"models"}, &out, &err), 1);
  EXPECT_EQ(err.rfind("error: UNAUTHENTICATED: ", 0), 0u) << err;
  EXPECT_EQ(Cli(*daemon_, {"profiles", "list"}, &out, &err), 1);
  EXPECT_EQ(err.rfind("error: UNAUTHENTICATED: ", 0), 0u) << err;
  EXPECT_EQ(Cli(*daemon_, {"health"}, &out, &err), 0) << err;  // not an Admin call
}

TEST_F(CliAdminTokenE2E, AWrongTokenIsPermissionDenied) {
  std::string out, err;
  EXPECT_EQ(Cli(*daemon_, {"--token-file", files_->Sub("wrong.token"), "models"}, &out, &err), 1);
  EXPECT_EQ(err.rfind("error: PERMISSION_DENIED: ", 0), 0u) << err;
  EXPECT_EQ(Cli(*daemon_, {"status", "tiny-llama", "--token-file", files_->Sub("wrong.token")}, &out, &err), 1);
  EXPECT_EQ(err.rfind("error: PERMISSION_DENIED: ", 0), 0u) << err;
}

TEST_F(CliAdminTokenE2E, TheRightTokenFromAFileOrTheEnvironmentSucceeds) {
  std::string out, err;
  ASSERT_EQ(Cli(*daemon_, {"--token-file", files_->Sub("right.token"), "models"}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "tiny-llama")) << out;
  ASSERT_EQ(Cli(*daemon_, {"server", "--token-file", files_->Sub("right.token")}, &out, &err), 0) << err;
  EXPECT_TRUE(Contains(out, "\nadmin_auth: true\n")) << out;
  ASSERT_EQ(RunCommand({"/usr/bin/env", std::string("AUTOUVM_ADMIN_TOKEN=") + kToken, AUTOUVM_CLI_PATH, "--addr",
                        daemon_->address(), "status", "tiny-llama"},
                       &out, &err),
            0)
      << err;
  EXPECT_TRUE(Contains(out, "state: READY")) << out;
}

// Usage errors: caught before any call, so no daemon is needed.
TEST(CliProfilesE2ENoServer, BadOptionsAreUsageErrors) {
  std::string out, err;
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {AUTOUVM_CLI_PATH, "--addr", "127.0.0.1:1", "--timeout", "2"});
    return RunCommand(args, &out, &err);
  };
  EXPECT_EQ(cli({"--token-file", "/nonexistent/admin.token", "models"}), 2);
  EXPECT_TRUE(Contains(err, "/nonexistent/admin.token")) << err;
  EXPECT_EQ(cli({"profiles", "show", "tiny-llama"}), 2) << err;  // neither --key nor a shape
  EXPECT_EQ(cli({"profiles", "show", "tiny-llama", "--key", "k", "--phase", "decode", "--batch", "1"}), 2) << err;
  EXPECT_EQ(cli({"profiles", "delete", "tiny-llama", "--phase", "decode", "--batch", "0"}), 2) << err;
  EXPECT_TRUE(Contains(err, "--batch")) << err;
  EXPECT_EQ(cli({"reprofile", "tiny-llama", "--phase", "prefill", "--batch", "1"}), 2) << err;
  EXPECT_TRUE(Contains(err, "--prompt-len")) << err;
  EXPECT_EQ(cli({"reprofile", "tiny-llama", "--phase", "decode", "--batch", "1", "--prompt-len", "8"}), 2) << err;
  EXPECT_TRUE(Contains(err, "--prompt-len")) << err;
  EXPECT_EQ(cli({"profiles", "export", "tiny-llama"}), 2) << err;  // no -o
}

}  // namespace
}  // namespace autouvm::testing
