// TempDir: a fresh directory under $TMPDIR for one test, removed with everything in it on destruction.
// Not thread-safe; one per test.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace autouvm::testing {

class TempDir {
 public:
  // Under $TMPDIR when that is a usable directory, else /tmp; aborts with a message if neither works.
  TempDir() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec || !std::filesystem::is_directory(base, ec)) base = "/tmp";
    std::string pattern = (base / "autouvm-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "TempDir: mkdtemp(%s) failed: %s\n", pattern.c_str(), std::strerror(errno));
      std::abort();
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

}  // namespace autouvm::testing
