// The CLI's text helpers: EscapeForTerminal keeps text and escapes what would drive a terminal.
#include "clients/text_output.h"

#include <gtest/gtest.h>

namespace autouvm::cli {
namespace {

TEST(EscapeForTerminalTest, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(EscapeForTerminal("a\x1b[2Jb"), "a\\x1b[2Jb");  // ESC: clear screen
  EXPECT_EQ(EscapeForTerminal("\a\b\f\r\v"), "\\x07\\x08\\x0c\\x0d\\x0b");
  EXPECT_EQ(EscapeForTerminal(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(EscapeForTerminal("del\x7f"), "del\\x7f");
  EXPECT_EQ(EscapeForTerminal("c1\xc2\x85\xc2\x9b"), "c1\\u0085\\u009b");  // NEL, CSI
}

TEST(EscapeForTerminalTest, TextNewlinesTabsAndOtherCharactersStayAsTheyAre) {
  EXPECT_EQ(EscapeForTerminal("line one\n\tline two"), "line one\n\tline two");
  EXPECT_EQ(EscapeForTerminal("caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeForTerminal("\xef\xbf\xbd"), "\xef\xbf\xbd");  // U+FFFD, what bad bytes decode to
  EXPECT_EQ(EscapeForTerminal("ends in \xc2"), "ends in \xc2");  // not a C1 control: left alone
  EXPECT_EQ(EscapeForTerminal(""), "");
}

}  // namespace
}  // namespace autouvm::cli
