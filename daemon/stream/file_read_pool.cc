// File: daemon/stream/file_read_pool.cc
#include "daemon/stream/file_read_pool.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"

namespace ddo {

int FileReadThreadsFromEnvironment() {
  constexpr int kDefault = 4;
  const char* text = std::getenv("DDO_FILE_READ_THREADS");
  int threads = 0;
  if (text == nullptr || !absl::SimpleAtoi(text, &threads) || threads < 1 || threads > 64) {
    return kDefault;
  }
  return threads;
}

FileReadPool::FileReadPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

FileReadPool::~FileReadPool() { Stop(); }

bool FileReadPool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  jobs_.push_back(std::move(job));
  return true;
}

void FileReadPool::Stop() {
  std::deque<std::function<void()>> dropped;  // destroyed outside the lock
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(jobs_);
  }
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void FileReadPool::Run() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &FileReadPool::HasJobOrStopping));
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace ddo
