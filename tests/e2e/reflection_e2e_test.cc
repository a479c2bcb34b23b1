// End-to-end: a reflection client (what grpcurl does) can list autouvmd's services and fetch their
// schemas without any .proto file.
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <set>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/e2e/daemon_process.h"

namespace autouvm::testing {
namespace {

using grpc::reflection::v1alpha::ServerReflection;
using grpc::reflection::v1alpha::ServerReflectionRequest;
using grpc::reflection::v1alpha::ServerReflectionResponse;

TEST(ReflectionE2E, ListsTheServicesAndDescribesGenerateStream) {
  DaemonProcess d;
  ASSERT_TRUE(d.Start()) << d.Log();
  auto stub = ServerReflection::NewStub(d.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&ctx);

  ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  ServerReflectionResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  std::set<std::string> services;
  for (const auto& s : resp.list_services_response().service()) services.insert(s.name());
  EXPECT_TRUE(services.count("autouvm.v1.Generation")) << resp.DebugString();
  EXPECT_TRUE(services.count("autouvm.v1.Admin")) << resp.DebugString();
  EXPECT_TRUE(services.count("grpc.health.v1.Health")) << resp.DebugString();

  ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol("autouvm.v1.Generation");
  ASSERT_TRUE(stream->Write(symbol));
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(resp.has_file_descriptor_response()) << resp.DebugString();
  bool found = false;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& service : file.service()) {
      if (service.name() != "Generation") continue;
      for (const auto& method : service.method()) {
        if (method.name() == "GenerateStream") {
          found = true;
          EXPECT_TRUE(method.server_streaming());
          EXPECT_EQ(method.input_type(), ".autouvm.v1.GenerateRequest");
        }
      }
    }
  }
  EXPECT_TRUE(found);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace autouvm::testing
