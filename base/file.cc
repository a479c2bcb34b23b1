#include "base/file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace autouvm::base {

absl::StatusOr<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open ", what));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": reading ", what, " failed"));
  return ss.str();
}

}  // namespace autouvm::base
