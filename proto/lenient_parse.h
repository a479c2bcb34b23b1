// Requests that do not parse still reach the handler, marked, so that a client hears what is wrong.
//
// Note [Requests that do not parse]: proto3 `string` fields must hold UTF-8, and protobuf refuses to
// parse a message where one does not. With gRPC's callback API (which the daemon's services use) a
// request that fails to parse never reaches the handler: the client gets UNIMPLEMENTED with no message
// (grpcpp's CallbackUnaryHandler / CallbackServerStreamingHandler), whatever was wrong. So the daemon's
// request messages are deserialized by LenientParse (the SerializationTraits below, included by every
// generated *.grpc.pb.h, proto/CMakeLists.txt): a message that parses is taken as is; one that does not
// is parsed again against a copy of its schema in which every string is bytes, the offending strings
// are emptied, and what was wrong ("text: not valid UTF-8 at byte 2", "stop[1]: ...", or "the request
// does not parse as autouvm.v1.GenerateRequest") is attached to the message as an unknown field.
// Handlers call RequestDefect first and answer INVALID_ARGUMENT with it.
//
//   if (std::string defect = autouvm::proto::RequestDefect(request); !defect.empty()) return Invalid(defect);
//
// Thread-safe: the schema copies are built once per message type, under a lock.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

namespace autouvm::proto {

// Parses `bytes` into `msg` (cleared first). Never fails: where `bytes` do not parse as they are, `msg`
// holds what could be read and RequestDefect(*msg) says what was wrong.
void LenientParse(const std::string& bytes, google::protobuf::Message* msg);

// What LenientParse found wrong with the request, "" if nothing.
std::string RequestDefect(const google::protobuf::Message& msg);

// A gRPC ByteBuffer's bytes (the buffer is left as it was).
std::string BufferBytes(grpc::ByteBuffer* buffer);

}  // namespace autouvm::proto

// grpc::SerializationTraits for a request type: serialized as protobuf's own, deserialized leniently.
#define AUTOUVM_LENIENT_REQUEST(Type)                                                                               \
  template <>                                                                                                       \
  class grpc::SerializationTraits<Type, void> {                                                                     \
   public:                                                                                                          \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb, bool* own_buffer) { \
      return grpc::GenericSerialize<grpc::ProtoBufferWriter, Type>(msg, bb, own_buffer);                            \
    }                                                                                                               \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer, Type* msg) {                                          \
      if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "no payload");                         \
      autouvm::proto::LenientParse(autouvm::proto::BufferBytes(buffer), msg);                                       \
      buffer->Clear();                                                                                              \
      return grpc::Status::OK;                                                                                      \
    }                                                                                                               \
  }
