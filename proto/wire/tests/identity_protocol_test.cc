#include "ddo/wire/identity_protocol.h"

#include <string>

#include "gtest/gtest.h"

namespace ddo {
namespace {

TEST(IdentityProtocolTest, ParsesTheThreeRequests) {
  auto hello = ParseIdentityRequest("HELLO 1", 0);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->kind, IdentityRequest::Kind::kHello);

  auto file = ParseIdentityRequest("FILE model.safetensors", 1);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->kind, IdentityRequest::Kind::kFile);
  EXPECT_EQ(file->name, "model.safetensors");

  auto open = ParseIdentityRequest("OPEN /ddo-0-abc-1 rw", 0);
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->kind, IdentityRequest::Kind::kOpen);
  EXPECT_EQ(open->name, "/ddo-0-abc-1");
  EXPECT_TRUE(open->writable);
}

TEST(IdentityProtocolTest, RefusesMalformedRequests) {
  for (const char* packet :
       {"", "HELLO", "HELLO 2", "HELLO 1 extra", "FILE", "FILE a/b", "FILE ..", "FILE a b",
        "FILE a\nb", "OPEN /x", "OPEN x ro", "OPEN /a/b ro", "OPEN /x rx", "OPEN / ro",
        "hello 1"}) {
    EXPECT_FALSE(ParseIdentityRequest(packet, 0).ok()) << packet;
  }
  EXPECT_FALSE(ParseIdentityRequest("FILE a", 0).ok());      // no descriptor
  EXPECT_FALSE(ParseIdentityRequest("FILE a", 2).ok());      // two descriptors
  EXPECT_FALSE(ParseIdentityRequest("HELLO 1", 1).ok());     // a descriptor where none goes
  EXPECT_FALSE(ParseIdentityRequest(std::string(5000, 'A'), 0).ok());
  EXPECT_FALSE(ParseIdentityRequest("FILE " + std::string(256, 'a'), 1).ok());
}

TEST(IdentityProtocolTest, ErrorsNeverEchoControlCharactersOrLongInput) {
  auto refused = ParseIdentityRequest("\x1b[2J" + std::string(3000, 'x'), 0);
  ASSERT_FALSE(refused.ok());
  const std::string answer = IdentityError(refused.status().message());
  EXPECT_EQ(answer.rfind("ERR ", 0), 0u);
  EXPECT_EQ(answer.find('\x1b'), std::string::npos);
  EXPECT_LT(answer.size(), 200u);
  EXPECT_EQ(IdentityOk("abc"), "OK abc");
  EXPECT_EQ(IdentityOk(), "OK");
}

}  // namespace
}  // namespace ddo
