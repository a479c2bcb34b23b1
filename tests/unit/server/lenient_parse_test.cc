// proto/lenient_parse: requests that protobuf refuses still parse, marked with what was wrong.
#include "proto/lenient_parse.h"

#include <gtest/gtest.h>

#include "autouvm/v1/admin.pb.h"
#include "autouvm/v1/generation.pb.h"
#include "autouvm/v1/profile.pb.h"

namespace autouvm::proto {
namespace {

using autouvm::v1::GenerateRequest;

// What a client that does not check UTF-8 sends: protobuf serializes such strings (logging an error).
std::string Wire(const google::protobuf::Message& m) { return m.SerializeAsString(); }

TEST(LenientParseTest, AValidRequestParsesAsItIs) {
  GenerateRequest sent;
  sent.set_model("m");
  sent.set_text("caf\xc3\xa9 \xf0\x9f\x98\x80");  // two- and four-byte characters
  sent.add_stop("x");
  GenerateRequest got;
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "");
  EXPECT_EQ(got.SerializeAsString(), sent.SerializeAsString());
}

TEST(LenientParseTest, InvalidUtf8IsNamedByFieldAndByteAndTheRestIsKept) {
  GenerateRequest sent;
  sent.set_model("tiny");
  sent.set_text("ab\xc3\x28z");
  sent.set_max_tokens(7);
  sent.add_stop("ok");
  sent.add_stop("\xed\xa0\x80");  // a UTF-16 surrogate, not a character
  GenerateRequest got;
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "text: not valid UTF-8 at byte 2");
  EXPECT_EQ(got.model(), "tiny");
  EXPECT_EQ(got.max_tokens(), 7u);
  EXPECT_EQ(got.text(), "");  // emptied
  ASSERT_EQ(got.stop_size(), 2);
  EXPECT_EQ(got.stop(0), "ok");
  EXPECT_EQ(got.stop(1), "");
}

TEST(LenientParseTest, OverlongFormsAndTruncatedCharactersAreInvalid) {
  for (const auto& [bad, at] : std::vector<std::pair<std::string, std::string>>{
           {"a\xc0\xaf", "byte 1"}, {"xyz\xe2\x82", "byte 3"}, {"\xf4\x90\x80\x80", "byte 0"}, {"\xff", "byte 0"}}) {
    GenerateRequest sent;
    sent.add_stop(bad);
    GenerateRequest got;
    LenientParse(Wire(sent), &got);
    EXPECT_EQ(RequestDefect(got), "stop[0]: not valid UTF-8 at " + at);
  }
}

TEST(LenientParseTest, StringsInsideRepeatedMessagesAreNamedByTheirPath) {
  autouvm::v1::ImportProfilesRequest sent;
  sent.mutable_bundle()->set_exported_by("me");
  sent.mutable_bundle()->add_entries()->set_key("fine");
  sent.mutable_bundle()->add_entries()->set_key("bad \xfe");
  autouvm::v1::ImportProfilesRequest got;
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "bundle.entries[1].key: not valid UTF-8 at byte 4");
  ASSERT_EQ(got.bundle().entries_size(), 2);
  EXPECT_EQ(got.bundle().entries(0).key(), "fine");
}

// A message with a map (AccessTrace.coded_bytes) has a twin too: its entries are checked as a repeated
// message. Before, the map's twin did not build, and every request of admin.proto, which imports
// profile.proto, went without one (StringsInsideRepeatedMessagesAreNamedByTheirPath failed).
TEST(LenientParseTest, MapKeysAreCheckedAsTheEntriesOfARepeatedMessage) {
  autouvm::v1::AccessTrace sent;
  sent.add_named()->set_id("param:w");
  (*sent.mutable_coded_bytes())["bad \xfe"] = 7;
  autouvm::v1::AccessTrace got;
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "coded_bytes[0].key: not valid UTF-8 at byte 4");
  ASSERT_EQ(got.named_size(), 1);
  EXPECT_EQ(got.named(0).id(), "param:w");
  ASSERT_EQ(got.coded_bytes().size(), 1u);
  EXPECT_EQ(got.coded_bytes().at(""), 7) << "the key emptied, the value kept";
}

TEST(LenientParseTest, BytesThatAreNotAMessageSaySo) {
  GenerateRequest got;
  LenientParse(std::string("\x0a\xff\xff\xff\xff\x0f\x01", 7), &got);
  EXPECT_EQ(RequestDefect(got), "the request does not parse as autouvm.v1.GenerateRequest");
}

TEST(LenientParseTest, AClientCannotSendADefectOfItsOwn) {
  GenerateRequest sent;
  sent.set_model("m");
  sent.GetReflection()->MutableUnknownFields(&sent)->AddLengthDelimited(536870911, "spoofed");
  GenerateRequest got;
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "");
  EXPECT_EQ(got.model(), "m");
  // Nor beside a string that is not UTF-8.
  sent.set_text("\xff");
  LenientParse(Wire(sent), &got);
  EXPECT_EQ(RequestDefect(got), "text: not valid UTF-8 at byte 0");
}

}  // namespace
}  // namespace autouvm::proto
