// Tables, rounded numbers and timestamps for text output; see text_output.h.
#include "clients/text_output.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace autouvm::cli {

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
  std::cout.flush();
}

std::string HumanCount(int64_t n) {
  if (n <= 0) return "-";
  if (n >= 1'000'000'000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1'000'000) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1'000) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, "B");  // negative sizes are the server's bug: show them as is
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // 1023.95 rather than 1024: what would print as "1024.0" moves up a unit.
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f%s", value, kUnits[unit]);
}

std::string IsoTime(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f && c != 0xc2)) {
      out.push_back(static_cast<char>(c));
    } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[++i]));  // a C1 control, U+0080..U+009F
    } else if (c == 0xc2) {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("\\x%02x", c);
    }
  }
  return out;
}

}  // namespace autouvm::cli
