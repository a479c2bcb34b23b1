// Plain-text output shared by the commands: aligned tables, rounded counts and sizes, timestamps.
//
// Usage: PrintTable({{"NAME", "STATE"}, {"tiny", "READY"}}); HumanBytes(1536) == "1.5KiB".
// Thread-safety: PrintTable writes std::cout (call from one thread); the rest are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autouvm::cli {

// Left-aligned columns two spaces apart; the last column is not padded. Flushes stdout.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

// 15191712 -> "15.2M"; 0 or less (not known yet, e.g. while loading) -> "-".
std::string HumanCount(int64_t n);

// Binary units with one decimal: 0 -> "0B", 1536 -> "1.5KiB", 3 << 30 -> "3.0GiB".
std::string HumanBytes(int64_t bytes);

// Milliseconds since the Unix epoch as UTC ISO 8601 with milliseconds: "2024-05-01T12:00:00.250Z";
// 0 -> "-".
std::string IsoTime(int64_t unix_ms);

}  // namespace autouvm::cli
