// Protobuf messages as JSON lines on stdout, for the commands' --json mode.
//
// Output is the canonical proto3 JSON mapping (lowerCamelCase keys, enums by name, 64-bit integers as
// strings), one message per line, with fields at their default values included so that every key is
// always present. Thread-safety: writes to std::cout; call from one thread.
#pragma once

#include <google/protobuf/message.h>

namespace autouvm::cli {

// Writes `message` as one JSON line to stdout and flushes.
void PrintJsonLine(const google::protobuf::Message& message);

}  // namespace autouvm::cli
