// Plain-text output shared by the commands: aligned tables, rounded counts and sizes, timestamps.
//
// Usage: PrintTable({{"NAME", "STATE"}, {"tiny", "READY"}}); HumanBytes(1536) == "1.5KiB";
// EscapeForTerminal("a\x1b[2J") == "a\\x1b[2J".
// Thread-safety: PrintTable writes std::cout (call from one thread); the rest are pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace autouvm::cli {

// Left-aligned columns two spaces apart; the last column is not padded. Flushes stdout.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

// 15191712 -> "15.2M"; 0 or less (not known yet, e.g. while loading) -> "-".
std::string HumanCount(int64_t n);

// Binary units with one decimal: 0 -> "0B", 1536 -> "1.5KiB", 3 << 30 -> "3.0GiB".
std::string HumanBytes(int64_t bytes);

// Generated text as it may be written to a terminal: control characters other than newline and tab
// (C0, DEL and the C1 range U+0080..U+009F: ESC, BEL, backspace, form feed, ...) become visible escapes
// such as "\x1b" and "\u0085", so that a model's output cannot move the cursor, ring or recolour the
// terminal. Everything else, multi-byte characters included, is unchanged.
std::string EscapeForTerminal(std::string_view text);

// Milliseconds since the Unix epoch as UTC ISO 8601 with milliseconds: "2024-05-01T12:00:00.250Z";
// 0 -> "-".
std::string IsoTime(int64_t unix_ms);

}  // namespace autouvm::cli
