#include "ddo/os/system_facts.h"

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ddo::os {
namespace {

TEST(SystemFactsTest, RandomBytesFillTheWholeBufferAndDifferEachTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    std::string bytes(32, '\0');
    ASSERT_TRUE(FillRandomBytes(bytes.data(), bytes.size()).ok());
    seen.insert(bytes);
  }
  EXPECT_EQ(seen.size(), 8u);
  // Nothing of a large buffer is left as it was (a chance of 2^-8 per byte, so a run of 64
  // untouched zeros at the end would mean the fill stopped short).
  std::vector<unsigned char> large(1 << 20, 0);
  ASSERT_TRUE(FillRandomBytes(large.data(), large.size()).ok());
  int trailing_zeros = 0;
  for (auto it = large.rbegin(); it != large.rend() && *it == 0; ++it) ++trailing_zeros;
  EXPECT_LT(trailing_zeros, 64);
}

TEST(SystemFactsTest, AnEmptyFillSucceeds) { EXPECT_TRUE(FillRandomBytes(nullptr, 0).ok()); }

TEST(SystemFactsTest, StderrIsNotTheJournalWithoutJournalStream) {
#ifdef _WIN32
  EXPECT_FALSE(StderrIsSystemJournal());
#else
  // A JOURNAL_STREAM naming another file is not stderr.
  ::setenv("JOURNAL_STREAM", "1:1", 1);
  EXPECT_FALSE(StderrIsSystemJournal());
  ::unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(StderrIsSystemJournal());
#endif
}

}  // namespace
}  // namespace ddo::os
