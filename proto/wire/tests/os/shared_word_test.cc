#include "ddo/os/shared_word.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "child_process.h"
#include "ddo/os/process_watch.h"
#include "ddo/os/shared_memory.h"
#include "gtest/gtest.h"

namespace ddo::os {
namespace {

using test::ChildProcess;

std::string UniqueName(const std::string& what) {
  return absl::StrCat("ddo-os-test-", CurrentProcessId(), "-", what);
}

// A segment whose first word is waited on, and its signal.
struct WaitedWord {
  std::string segment_name;
  std::string signal_name;
  SharedMemory segment;
  MappedView view;
  SharedWordSignal signal;

  const std::atomic<uint32_t>* word() const {
    return static_cast<const std::atomic<uint32_t>*>(view.data());
  }
};

absl::StatusOr<WaitedWord> MakeWaitedWord(const std::string& what) {
  const std::string segment_name = UniqueName(what + "-word");
  const std::string signal_name = UniqueName(what + "-signal");
  absl::StatusOr<SharedMemory> segment = SharedMemory::Create(segment_name, 4096);
  if (!segment.ok()) return segment.status();
  absl::StatusOr<MappedView> view = segment->Map(/*writable=*/true);
  if (!view.ok()) return view.status();
  absl::StatusOr<SharedWordSignal> signal = SharedWordSignal::Create(signal_name);
  if (!signal.ok()) return signal.status();
  return WaitedWord{segment_name, signal_name, *std::move(segment), *std::move(view),
                    *std::move(signal)};
}

TEST(SharedWordTest, AnotherProcessWakesTheWaiter) {
  absl::StatusOr<WaitedWord> waited = MakeWaitedWord("change");
  ASSERT_TRUE(waited.ok()) << waited.status();
  const std::atomic<uint32_t>* word = waited->word();
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Start({"wake", waited->segment_name, waited->signal_name, "1"});
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time started = absl::Now();
  // A wait may return early: re-read, as every caller does.
  while (word->load(std::memory_order_acquire) == 0 && absl::Now() - started < absl::Seconds(20)) {
    waited->signal.Wait(word, 0, absl::Seconds(20));
  }
  EXPECT_EQ(word->load(), 1u);
  EXPECT_LT(absl::Now() - started, absl::Seconds(10));
  EXPECT_EQ(child->Wait(), 0);
  (void)SharedMemory::Remove(waited->segment_name);
}

// The wake itself crosses processes (not only the change, which a waiter reading the word in
// slices would see anyway): the word stays the same and the one wait still ends early.
TEST(SharedWordTest, AWakeFromAnotherProcessEndsTheWait) {
  absl::StatusOr<WaitedWord> waited = MakeWaitedWord("poke");
  ASSERT_TRUE(waited.ok()) << waited.status();
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Start({"wake", waited->segment_name, waited->signal_name, "0"});
  ASSERT_TRUE(child.ok()) << child.status();
  const absl::Time started = absl::Now();
  waited->signal.Wait(waited->word(), 0, absl::Seconds(15));
  EXPECT_LT(absl::Now() - started, absl::Seconds(10));
  EXPECT_EQ(child->Wait(), 0);
  (void)SharedMemory::Remove(waited->segment_name);
}

TEST(SharedWordTest, AWaitReturnsAtOnceWhenTheWordDiffersAndAtItsTimeoutOtherwise) {
  absl::StatusOr<SharedWordSignal> signal = SharedWordSignal::Create(UniqueName("timeout"));
  ASSERT_TRUE(signal.ok()) << signal.status();
  std::atomic<uint32_t> word{7};
  absl::Time started = absl::Now();
  signal->Wait(&word, 6, absl::Seconds(10));
  EXPECT_LT(absl::Now() - started, absl::Seconds(5));
  started = absl::Now();
  signal->Wait(&word, 7, absl::Milliseconds(150));
  const absl::Duration waited = absl::Now() - started;
  EXPECT_GE(waited, absl::Milliseconds(100));
  EXPECT_LT(waited, absl::Seconds(5));
}

TEST(SharedWordTest, BadNamesAreRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(SharedWordSignal::Create("a/b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SharedWordSignal::Open("").status()));
}

}  // namespace
}  // namespace ddo::os
