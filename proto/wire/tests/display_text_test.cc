// File: proto/wire/tests/display_text_test.cc
#include "ddo/wire/display_text.h"

#include <string>

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(DisplayTextTest, PrintableTextIsKept) {
  EXPECT_EQ(EscapeForDisplay("transformer_blocks.0.attn", 64), "transformer_blocks.0.attn");
  EXPECT_EQ(EscapeForDisplay("", 64), "");
}

TEST(DisplayTextTest, ControlCharactersAndHighBytesAreEscaped) {
  EXPECT_EQ(EscapeForDisplay("a\nb", 64), "a\\x0ab");
  EXPECT_EQ(EscapeForDisplay("\x1b[2J", 64), "\\x1b[2J");
  EXPECT_EQ(EscapeForDisplay(std::string("k\0y", 3), 64), "k\\x00y");
  EXPECT_EQ(EscapeForDisplay("\x7f\xff\xc3\xa9", 64), "\\x7f\\xff\\xc3\\xa9");
  EXPECT_EQ(EscapeForDisplay("C:\\x41", 64), "C:\\\\x41");  // a literal backslash stays unambiguous
}

TEST(DisplayTextTest, LongTextIsTruncatedAndMarked) {
  const std::string long_key(1 << 20, 'k');
  const std::string shown = EscapeForDisplay(long_key, 8);
  EXPECT_EQ(shown, "kkkkkkkk...");
  EXPECT_EQ(EscapeForDisplay("12345678", 8), "12345678");  // exactly the limit: no mark
  EXPECT_EQ(EscapeForDisplay("\n\n\n\n", 2), "\\x0a\\x0a...");
  EXPECT_EQ(EscapeForDisplay("abc", 0), "...");
}

TEST(DisplayTextTest, DefaultShowsThePrefixBytes) {
  const std::string shown = EscapeForDisplay(std::string(1000, 'x'));
  EXPECT_EQ(shown, std::string(kDisplayPrefixBytes, 'x') + "...");
}

}  // namespace
}  // namespace ddo
