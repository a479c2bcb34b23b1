// JSON lines on stdout; see json_output.h.
#include "clients/json_output.h"

#include <google/protobuf/util/json_util.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace autouvm::cli {

void PrintJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  std::string json;
  // A parsed message always converts; failing here is a broken invariant, so crash loudly.
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    std::cerr << "fatal: cannot print " << message.GetTypeName() << " as JSON: " << status << std::endl;
    std::abort();
  }
  std::cout << json << std::endl;
}

}  // namespace autouvm::cli
