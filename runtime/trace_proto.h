// AccessTrace <-> its protobuf form (proto/autouvm/v1/profile.proto), for storing and replaying traces.
// Pure functions; safe from any thread.
#pragma once

#include "autouvm/v1/profile.pb.h"
#include "runtime/access_trace.h"

namespace autouvm::runtime {

autouvm::v1::AccessTrace ToProto(const AccessTrace& trace);
AccessTrace FromProto(const autouvm::v1::AccessTrace& proto);

}  // namespace autouvm::runtime
